package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// soakReport is the soak: the renewal row's shape (closed loop, --clients
// clients over the three candidates, each heartbeating its own resource)
// for --soak, with every node's RSS and raft.db size sampled throughout.
type soakReport struct {
	DurationSeconds    float64 `json:"durationSeconds"`
	SampleEverySeconds float64 `json:"sampleEverySeconds"`
	Load               *stats  `json:"load"`
	// Peaks is each node's footprint over the soak.
	Peaks []nodePeak `json:"peaks"`
	// Snapshots is each node's snapshots during the soak.
	Snapshots []nodeSnapshots `json:"snapshots"`
	// LeaderChanges is the most leader changes a node counted during the
	// soak, and TermChange how far the term moved (as in the calm run): an
	// election under load shows here and in the errors.
	LeaderChanges int    `json:"leaderChanges"`
	TermChange    uint64 `json:"termChange"`
}

// nodeSnapshots is one node's snapshots within a window.
type nodeSnapshots struct {
	Node string `json:"node"`
	// Taken is how many it completed within the window (from its log),
	// MaxMs the longest of them.
	Taken int     `json:"taken"`
	MaxMs float64 `json:"maxMs,omitempty"`
	// LastSnapshotIndex is its raft last_snapshot_index at the window's end;
	// LastIndex its last log index then.
	LastSnapshotIndex uint64 `json:"lastSnapshotIndex"`
	LastIndex         uint64 `json:"lastIndex"`
	// Retained is how many snapshots raft/snapshots holds then.
	Retained int `json:"retained"`
}

// snapshotsIn gathers each node's snapshots completed since since.
func (s *elanousSystem) snapshotsIn(ctx context.Context, since time.Time) ([]nodeSnapshots, error) {
	spans, err := s.snapshotsSince(since)
	if err != nil {
		return nil, err
	}
	var out []nodeSnapshots
	for i, n := range s.nodes {
		ns := nodeSnapshots{Node: n.name, Retained: s.retainedSnapshots(i)}
		for _, sp := range spans {
			if sp.Node == n.name {
				ns.Taken++
				ns.MaxMs = max(ns.MaxMs, sp.DurationMs)
			}
		}
		if st, err := s.clusterStatus(ctx, i); err == nil {
			ns.LastSnapshotIndex, _ = raftStat(st, "last_snapshot_index")
			ns.LastIndex = st.LastIndex
		}
		out = append(out, ns)
	}
	return out, nil
}

// footprintLine is a progress line's view of the nodes: RSS and raft.db now.
func footprintLine(ps []nodePeak) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %s/%s", p.Node, mib(p.LastRSSBytes), mib(p.LastDBBytes)))
	}
	return "RSS/raft.db " + strings.Join(parts, ", ")
}

// runSoak runs the soak on the elanous cluster.
func runSoak(ctx context.Context, s *elanousSystem, o options, pr *printer) (*soakReport, error) {
	pr.logf("elanous: soak: %d clients heartbeating for %s, sampling every %s", o.clients, o.soak, o.sampleEvery)
	steps, cleanup, err := s.Workers(ctx, rowRenewal, o.clients)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &soakReport{DurationSeconds: o.soak.Seconds(), SampleEverySeconds: o.sampleEvery.Seconds()}
	mark, err := s.markLeadership(ctx)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	smp := startSampler(ctx, o.sampleEvery, s.sample)
	every := progressEvery(o.soak)
	var last time.Duration
	rep.Load = runLoad(ctx, steps, o.soak, func(elapsed time.Duration, ops, errs int64) {
		if elapsed-last >= every {
			last = elapsed
			pr.logf("elanous: soak: %5.0fs %9d ops %6d errors (%s/s so far); %s", elapsed.Seconds(), ops, errs,
				thousands(float64(ops)/elapsed.Seconds()), footprintLine(smp.current()))
		}
	})
	rep.Peaks = smp.stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	pr.logf("elanous: soak: %s", rep.Load.summary())
	if rep.Load.Ops == 0 {
		return nil, fmt.Errorf("soak: no heartbeat succeeded (%d errors: %s)", rep.Load.Errors, rep.Load.errorText())
	}
	if rep.Snapshots, err = s.snapshotsIn(ctx, t0); err != nil {
		return nil, err
	}
	if _, rep.LeaderChanges, rep.TermChange, err = s.leaderChangesSince(ctx, mark, rep.Peaks, "soak", pr); err != nil {
		return nil, err
	}
	for i, p := range rep.Peaks {
		sn := rep.Snapshots[i]
		pr.logf("elanous: soak: %s highest RSS %s, raft.db up to %s; %d snapshots taken (longest %.0f ms), last_snapshot_index %d of %d",
			p.Node, mib(p.HighestRSS()), mib(p.MaxDBBytes), sn.Taken, sn.MaxMs, sn.LastSnapshotIndex, sn.LastIndex)
	}
	return rep, nil
}

// calmReport is the calm run: an open loop of heartbeats at a fraction of
// the renewal row's peak for --calm, counting leader changes.
type calmReport struct {
	// PeakPerSec is the renewal row's rate the load is a fraction of;
	// PeakFrom says where it came from: "renewal row", "measured" (a
	// renewal run of --duration before the calm run) or "--calm-rate".
	PeakPerSec float64 `json:"peakPerSec"`
	PeakFrom   string  `json:"peakFrom"`
	Fraction   float64 `json:"fraction"`
	Load       *stats  `json:"load"`
	// LeaderChanges is the most leader changes any node observed during the
	// run (its elanous_raft_leader_changes_total before and after);
	// TermChange how far the highest term moved (an election that elects
	// nobody moves it too).
	LeaderChanges int        `json:"leaderChanges"`
	TermChange    uint64     `json:"termChange"`
	Nodes         []calmNode `json:"nodes"`
	Peaks         []nodePeak `json:"peaks"`
}

// calmNode is one node's leadership figures before and after the calm run.
type calmNode struct {
	Node          string  `json:"node"`
	ChangesBefore float64 `json:"changesBefore"`
	ChangesAfter  float64 `json:"changesAfter"`
	TermBefore    uint64  `json:"termBefore"`
	TermAfter     uint64  `json:"termAfter"`
	// Restarted is true when the node's process changed within the run,
	// which resets its counter.
	Restarted bool `json:"restarted,omitempty"`
}

// leadership reads each node's leader-change counter and term.
func (s *elanousSystem) leadership(ctx context.Context) ([]calmNode, error) {
	var out []calmNode
	for i, n := range s.nodes {
		text, err := s.metrics(ctx, i)
		if err != nil {
			return nil, err
		}
		v, ok, err := metricValue(text, "elanous_raft_leader_changes_total")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s exposes no elanous_raft_leader_changes_total", n.name)
		}
		st, err := s.clusterStatus(ctx, i)
		if err != nil {
			return nil, err
		}
		out = append(out, calmNode{Node: n.name, ChangesBefore: v, TermBefore: st.Term})
	}
	return out, nil
}

// leaderChanges folds the readings before and after a run into the nodes'
// figures and the run's count: the most changes one node observed, and how
// far the highest term moved.
func leaderChanges(before, after []calmNode, restarted []bool) (nodes []calmNode, changes int, termChange uint64) {
	var termBefore, termAfter uint64
	for i := range before {
		n := before[i]
		n.ChangesAfter, n.TermAfter = after[i].ChangesBefore, after[i].TermBefore
		n.Restarted = restarted[i]
		nodes = append(nodes, n)
		termBefore, termAfter = max(termBefore, n.TermBefore), max(termAfter, n.TermAfter)
		if !n.Restarted {
			changes = max(changes, int(n.ChangesAfter-n.ChangesBefore))
		}
	}
	if termAfter > termBefore {
		termChange = termAfter - termBefore
	}
	return nodes, changes, termChange
}

// leadershipMark is the cluster's leadership and its nodes' processes when
// a measurement starts, to count the leader changes over it.
type leadershipMark struct {
	before []calmNode
	pids   []int
}

func (s *elanousSystem) markLeadership(ctx context.Context) (leadershipMark, error) {
	before, err := s.leadership(ctx)
	if err != nil {
		return leadershipMark{}, err
	}
	return leadershipMark{before: before, pids: s.pids()}, nil
}

// leaderChangesSince reads the leadership again and compares it with m (see
// leaderChanges; peaks tell which nodes restarted), logging the outcome of
// the measurement what.
func (s *elanousSystem) leaderChangesSince(ctx context.Context, m leadershipMark, peaks []nodePeak, what string, pr *printer) (nodes []calmNode, changes int, termChange uint64, err error) {
	after, err := s.leadership(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	nodes, changes, termChange = leaderChanges(m.before, after, s.restartedSince(m.pids, peaks))
	pr.logf("elanous: %s: %d leader changes, term moved by %d", what, changes, termChange)
	return nodes, changes, termChange, nil
}

// pids is every node's process id.
func (s *elanousSystem) pids() []int {
	var out []int
	for _, n := range s.nodes {
		out = append(out, n.p.Pid())
	}
	return out
}

// restartedSince tells, per node, whether its process is not the one of pids
// or another one was sampled in between.
func (s *elanousSystem) restartedSince(pids []int, peaks []nodePeak) []bool {
	out := make([]bool, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.p.Pid() != pids[i] || (i < len(peaks) && !slices.Equal(peaks[i].PIDs, []int{pids[i]}))
	}
	return out
}

// registerBench registers the first n bench resources (benchID) through
// their clients' nodes, so heartbeats on them succeed.
func (s *elanousSystem) registerBench(ctx context.Context, n int) error {
	cs := s.clients(n, -1, requestTimeout)
	defer closeIdle(cs)
	for i, c := range cs {
		if err := retry(ctx, 3, func(ctx context.Context) error { return c.register(ctx, registerBody(benchID(i), "bench", benchTTLMs)) }); err != nil {
			return fmt.Errorf("register %s: %w", benchID(i), err)
		}
	}
	return nil
}

// runCalm runs the calm run; peak is the renewal row's elanous rate when
// that row ran (0 otherwise: it is measured first).
func runCalm(ctx context.Context, s *elanousSystem, o options, peak float64, pr *printer) (*calmReport, error) {
	rep := &calmReport{PeakPerSec: peak, PeakFrom: "renewal row", Fraction: o.calmFraction}
	switch {
	case o.calmRate > 0:
		rep.PeakPerSec, rep.PeakFrom, rep.Fraction = o.calmRate, "--calm-rate", 1
	case peak == 0:
		st, err := runRow(ctx, s, rowRenewal, o.clients, o.duration, pr)
		if err != nil {
			return nil, fmt.Errorf("measure the peak: %w", err)
		}
		rep.PeakPerSec, rep.PeakFrom = st.OpsPerSec, "measured"
	}
	rate := rep.PeakPerSec * rep.Fraction
	if err := s.registerBench(ctx, o.clients); err != nil {
		return nil, err
	}
	if err := s.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	mark, err := s.markLeadership(ctx)
	if err != nil {
		return nil, err
	}
	pr.logf("elanous: calm: open loop of %s heartbeats/s (%.0f%% of %s/s, %s) for %s over %d resources, %d connections",
		thousands(rate), rep.Fraction*100, thousands(rep.PeakPerSec), rep.PeakFrom, o.calm, o.clients, o.openClients)
	smp := startSampler(ctx, o.sampleEvery, s.sample)
	rep.Load, err = s.openHeartbeats(ctx, rate, o.calm, o.openClients, func(k int) (string, []byte) { return benchID(k % o.clients), []byte("{}") }, "calm", pr)
	rep.Peaks = smp.stop()
	if err != nil {
		return nil, err
	}
	if rep.Nodes, rep.LeaderChanges, rep.TermChange, err = s.leaderChangesSince(ctx, mark, rep.Peaks, "calm", pr); err != nil {
		return nil, err
	}
	return rep, nil
}
