package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/wire"
)

// scaleReport is what the elanous cluster does with --fill N resources in
// its state (the scale phase, right after the fill): its memory with N
// resources and a band of leases held, the heartbeat rate beside the rate on
// an empty state, an open-loop heartbeat load at a fixed rate over the N
// resources, the snapshots taken once the state held N resources, and how
// long a follower takes to serve again after a restart.
type scaleReport struct {
	Resources int `json:"resources"`
	// Leases is how many port leases were held, each by a machine of its
	// own, through the phase.
	Leases int `json:"leases"`
	// AtRest is each node's footprint once the fill is done and the leases
	// are held, before any load.
	AtRest []nodeSample `json:"atRest"`
	// EmptyHeartbeat is the renewal row's shape (closed loop, --clients
	// clients) on the empty state before the fill; FilledHeartbeat the same
	// after it; HeartbeatRatio filled / empty.
	EmptyHeartbeat  *stats  `json:"emptyHeartbeat"`
	FilledHeartbeat *stats  `json:"filledHeartbeat"`
	HeartbeatRatio  float64 `json:"heartbeatRatio"`
	// Open is the open loop: --rate heartbeats/s for --rate-duration, each on
	// the next of the N resources.
	Open *stats `json:"openLoop"`
	// Primed is how many of the N resources were heartbeat once before the
	// open loop's clock (every one it renews, with --fill-shape instance),
	// in PrimeSeconds: the first renewal after a register is a write with
	// the slack, and from then on a renewal is covered, as a member's is in
	// its steady state.
	Primed       int     `json:"primed,omitempty"`
	PrimeSeconds float64 `json:"primeSeconds,omitempty"`
	// Snapshots are those started after the fill (with N resources in the
	// state); SnapshotWaitSeconds how long the phase waited for them after
	// the load, and LastSnapshotIndex each node's raft last_snapshot_index
	// then.
	Snapshots           []snapshotSpan    `json:"snapshots"`
	SnapshotMaxMs       float64           `json:"snapshotMaxMs,omitempty"`
	SnapshotWaitSeconds float64           `json:"snapshotWaitSeconds"`
	LastSnapshotIndex   map[string]uint64 `json:"lastSnapshotIndex"`
	// Peaks is each node's footprint over the phase up to the restart.
	Peaks []nodePeak `json:"peaks"`
	// Backups are the snapshot saves taken after the open loop (--backups).
	Backups []backupSpan `json:"backups,omitempty"`
	// Restart is the follower restart.
	Restart *restartReport `json:"restart,omitempty"`
}

// restartReport is one follower restart: SIGTERM, exit, start, /v1/ready.
type restartReport struct {
	Node string `json:"node"`
	// StopMs runs from SIGTERM to the process's exit; ReadyMs from the new
	// process's start to its first 200 on /v1/ready.
	StopMs  float64 `json:"stopMs"`
	ReadyMs float64 `json:"readyMs"`
	// SnapshotsOnDisk is how many snapshots the node had retained when it
	// stopped; LastIndex and LastSnapshotIndex its raft log's last index
	// and its last snapshot's before the stop (what it had to restore and
	// replay).
	SnapshotsOnDisk   int    `json:"snapshotsOnDisk"`
	LastIndex         uint64 `json:"lastIndex"`
	LastSnapshotIndex uint64 `json:"lastSnapshotIndex"`
	// RSSBytes is the restarted process's RSS once ready.
	RSSBytes int64 `json:"rssBytes"`
}

// backupSpan is one snapshot save (GET /v1/snapshot) read to its end.
type backupSpan struct {
	Node       string  `json:"node"`
	Bytes      int64   `json:"bytes"`
	DurationMs float64 `json:"durationMs"`
}

// backup takes a snapshot save from the leader with the admin token and reads
// it to the end, as `elanous-node snapshot save` does (without the file).
func (s *elanousSystem) backup(ctx context.Context) (backupSpan, error) {
	l, err := s.Leader(ctx)
	if err != nil {
		return backupSpan{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.nodes[l].url+"/v1/snapshot", nil)
	if err != nil {
		return backupSpan{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.adminToken)
	t0 := time.Now()
	resp, err := newHTTPClient().Do(req)
	if err != nil {
		return backupSpan{}, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return backupSpan{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return backupSpan{}, fmt.Errorf("GET /v1/snapshot on %s: %s", s.nodes[l].name, resp.Status)
	}
	return backupSpan{Node: s.nodes[l].name, Bytes: n, DurationMs: ms(time.Since(t0))}, nil
}

// sample reads every node's pid, RSS and raft.db size.
func (s *elanousSystem) sample() []nodeSample {
	var out []nodeSample
	for _, n := range s.nodes {
		pid := n.p.Pid()
		m, _ := readProcMemory(pid)
		if n.p.Exited() {
			pid, m = 0, procMemory{}
		}
		out = append(out, nodeSample{Node: n.name, PID: pid, RSSBytes: m.RSSBytes,
			DBBytes: fileSize(filepath.Join(n.dataDir, "raft", "raft.db"))})
	}
	return out
}

// heldLease is a port lease the scale phase holds.
type heldLease struct {
	port    int
	leaseID string
}

// holdLeases acquires n port leases through the leader, each for a machine of
// its own named prefix-i (a machine may hold at most a quarter of the band),
// with TTL ttlMs. release gives them back.
func (s *elanousSystem) holdLeases(ctx context.Context, n int, prefix string, ttlMs int64) (leases []heldLease, release func(context.Context) error, err error) {
	l, err := s.Leader(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := &elClient{url: s.nodes[l].url, token: s.token, http: newHTTPClient(), timeout: requestTimeout}
	var held []heldLease
	release = func(ctx context.Context) error {
		defer c.http.CloseIdleConnections()
		var errs []error
		for _, h := range held {
			err := c.do(ctx, http.MethodDelete, "/v1/leases/port/"+strconv.Itoa(h.port), nil,
				http.Header{wire.HeaderPortLeaseID: {h.leaseID}}, http.StatusNoContent, nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("release port %d: %w", h.port, err))
			}
		}
		return errors.Join(errs...)
	}
	for i := range n {
		body, err := json.Marshal(wire.AcquireRequest{Machine: fmt.Sprintf("%s-%d", prefix, i), Purpose: "bench-" + prefix, TTLMs: ttlMs})
		if err != nil {
			return nil, nil, err
		}
		var pl wire.PortLease
		if err := c.do(ctx, http.MethodPost, "/v1/leases/port", body, nil, http.StatusCreated, &pl); err != nil {
			_ = release(ctx)
			return nil, nil, fmt.Errorf("acquire lease %d of %d: %w", i+1, n, err)
		}
		held = append(held, heldLease{port: pl.Port, leaseID: pl.LeaseID})
	}
	return held, release, nil
}

// openHeartbeats runs an open loop of heartbeats at rate for d over clients
// connections (client i on node i%3); request k heartbeats resource id with
// body, as beat(k) gives them.
func (s *elanousSystem) openHeartbeats(ctx context.Context, rate float64, d time.Duration, clients int, beat func(k int) (id string, body []byte), label string, pr *printer) (*stats, error) {
	cs := s.clients(clients, -1, requestTimeout)
	defer closeIdle(cs)
	var workers []openStep
	for i, c := range cs {
		// Warm-up: open every connection before the clock starts.
		do := func(ctx context.Context, k int) error {
			id, body := beat(k)
			return c.heartbeatWith(ctx, id, body)
		}
		if err := retry(ctx, 3, func(ctx context.Context) error { return do(ctx, i) }); err != nil {
			return nil, fmt.Errorf("warm-up of client %d: %w", i, err)
		}
		workers = append(workers, do)
	}
	every := progressEvery(d)
	var last time.Duration
	st := runOpenLoop(ctx, workers, rate, d, func(elapsed time.Duration, ops, errs int64) {
		if elapsed-last >= every {
			last = elapsed
			pr.logf("elanous: %s: %5.0fs %8d ok %6d errors (%s/s so far)", label, elapsed.Seconds(), ops, errs, thousands(float64(ops)/elapsed.Seconds()))
		}
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	pr.logf("elanous: %s: %s", label, st.openSummary())
	return st, nil
}

// progressEvery spaces the progress lines of a load of length d: every
// second for a short one, every 10 s for a long one.
func progressEvery(d time.Duration) time.Duration {
	if d > 2*time.Minute {
		return 10 * time.Second
	}
	if d > 20*time.Second {
		return 5 * time.Second
	}
	return time.Second
}

// waitReady polls node i's /v1/ready every 10 ms until it answers 200 or
// timeout passes.
func (s *elanousSystem) waitReady(ctx context.Context, i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.get(ctx, s.nodes[i].url+"/v1/ready")
		if err == nil {
			return nil
		}
		if s.nodes[i].p.Exited() {
			return fmt.Errorf("%s exited", s.nodes[i].name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s: %w", s.nodes[i].name, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitCaughtUp waits until every node has applied the leader's commit index
// as it was when the wait began, so a measurement after a fill does not catch
// the followers still applying it.
func (s *elanousSystem) waitCaughtUp(ctx context.Context, timeout time.Duration) error {
	l, err := s.Leader(ctx)
	if err != nil {
		return err
	}
	st, err := s.clusterStatus(ctx, l)
	if err != nil {
		return err
	}
	target := st.CommitIndex
	return testcluster.WaitFor(ctx, "every node to apply the commit index", timeout, pollEvery, func(ctx context.Context) error {
		for i, n := range s.nodes {
			st, err := s.clusterStatus(ctx, i)
			if err != nil {
				return err
			}
			if st.AppliedIndex < target {
				return fmt.Errorf("%s has applied %d of %d", n.name, st.AppliedIndex, target)
			}
		}
		return nil
	})
}

// restartFollower stops a follower with SIGTERM, starts it again on its data
// dir and times it until /v1/ready answers 200.
func (s *elanousSystem) restartFollower(ctx context.Context) (*restartReport, error) {
	if err := s.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	l, err := s.Leader(ctx)
	if err != nil {
		return nil, err
	}
	i := (l + 1) % len(s.nodes)
	n := s.nodes[i]
	rr := &restartReport{Node: n.name}
	if st, err := s.clusterStatus(ctx, i); err == nil {
		rr.LastIndex = st.LastIndex
		rr.LastSnapshotIndex, _ = raftStat(st, "last_snapshot_index")
	}
	t0 := time.Now()
	if err := n.p.Stop(30 * time.Second); err != nil {
		return nil, err
	}
	rr.StopMs = ms(time.Since(t0))
	rr.SnapshotsOnDisk = s.retainedSnapshots(i)
	n.restarts++
	t1 := time.Now()
	if err := s.startNode(i); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, i, 5*time.Minute); err != nil {
		return nil, err
	}
	rr.ReadyMs = ms(time.Since(t1))
	rr.RSSBytes = rssBytes(n.p.Pid())
	return rr, s.WaitHealthy(ctx)
}

// runScale is the scale phase, after a fill of o.fill resources that ended
// at filledAt; empty is the heartbeat row measured before the fill.
func runScale(ctx context.Context, s *elanousSystem, o options, empty *stats, filledAt time.Time, pr *printer) (*scaleReport, error) {
	rep := &scaleReport{Resources: o.fill, Leases: o.leases, EmptyHeartbeat: empty}
	t0 := time.Now()
	if err := s.waitCaughtUp(ctx, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("after the fill: %w", err)
	}
	pr.logf("elanous: scale: every node applied the fill %.1fs after it ended", time.Since(t0).Seconds())
	smp := startSampler(ctx, o.sampleEvery, s.sample)
	stopped := false
	defer func() {
		if !stopped {
			smp.stop()
		}
	}()

	if o.leases > 0 {
		pr.logf("elanous: scale: holding %d port leases, one machine each", o.leases)
		_, release, err := s.holdLeases(ctx, o.leases, "scale", wire.MaxLeaseTTLMs)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := release(context.WithoutCancel(ctx)); err != nil {
				pr.logf("elanous: scale: %v", err)
			}
		}()
	}
	rep.AtRest = s.sample()
	for _, n := range rep.AtRest {
		pr.logf("elanous: scale: %s at rest with %d resources and %d leases: RSS %s, raft.db %s", n.Node, o.fill, o.leases, mib(n.RSSBytes), mib(n.DBBytes))
	}

	st, err := runRow(ctx, s, rowRenewal, o.clients, o.duration, pr)
	if err != nil {
		return nil, fmt.Errorf("heartbeat at %d resources: %w", o.fill, err)
	}
	rep.FilledHeartbeat = st
	if empty != nil && empty.OpsPerSec > 0 {
		rep.HeartbeatRatio = st.OpsPerSec / empty.OpsPerSec
		pr.logf("elanous: scale: heartbeat at %d resources %s/s, on the empty state %s/s: %.2f×", o.fill, thousands(st.OpsPerSec), thousands(empty.OpsPerSec), rep.HeartbeatRatio)
	}

	if o.fillShape == shapeInstance {
		// Machine records publish a new load on every beat: each is a write
		// whatever came before, so only renewals are primed.
		n := min(o.fill, schedule{rate: o.rate, d: o.rateDuration}.total())
		pr.logf("elanous: scale: priming: one heartbeat of each of the %d resources the open loop renews", n)
		t0 := time.Now()
		cs := s.clients(o.clients, -1, requestTimeout)
		err := runParallel(ctx, n, o.clients, func(ctx context.Context, w, i int) error {
			return retry(ctx, 3, func(ctx context.Context) error { return cs[w].heartbeat(ctx, o.fillShape.id(i)) })
		}, nil)
		closeIdle(cs)
		if err != nil {
			return nil, fmt.Errorf("prime the open loop: %w", err)
		}
		rep.Primed, rep.PrimeSeconds = n, time.Since(t0).Seconds()
		pr.logf("elanous: scale: primed %d resources in %.1fs (%s/s)", n, rep.PrimeSeconds, thousands(float64(n)/rep.PrimeSeconds))
	}
	pr.logf("elanous: scale: open loop of %s heartbeats/s for %s over the %d resources, %d connections", thousands(o.rate), o.rateDuration, o.fill, o.openClients)
	rep.Open, err = s.openHeartbeats(ctx, o.rate, o.rateDuration, o.openClients, func(k int) (string, []byte) {
		return o.fillShape.id(k % o.fill), o.fillShape.heartbeat(k%o.fill, k)
	}, "scale: open loop", pr)
	if err != nil {
		return nil, err
	}

	for i := range o.backups {
		b, err := s.backup(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot save %d: %w", i+1, err)
		}
		rep.Backups = append(rep.Backups, b)
		pr.logf("elanous: scale: snapshot save %d from %s: %s in %.0f ms", i+1, b.Node, mib(b.Bytes), b.DurationMs)
	}

	waitStart := time.Now()
	err = testcluster.WaitFor(ctx, "the snapshots", o.snapshotWait, pollEvery, func(ctx context.Context) error {
		spans, err := s.snapshotsSince(filledAt)
		if err != nil {
			return err
		}
		var missing []string
		for _, n := range s.nodes {
			if !slices.ContainsFunc(spans, func(sp snapshotSpan) bool { return sp.Node == n.name }) {
				missing = append(missing, n.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no snapshot since the fill on %v", missing)
		}
		return nil
	})
	rep.SnapshotWaitSeconds = time.Since(waitStart).Seconds()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		pr.logf("elanous: scale: %v (waited %s; --snapshot-wait)", err, time.Since(waitStart).Round(time.Second))
	}
	if rep.Snapshots, err = s.snapshotsSince(filledAt); err != nil {
		return nil, err
	}
	for _, sp := range rep.Snapshots {
		rep.SnapshotMaxMs = max(rep.SnapshotMaxMs, sp.DurationMs)
		pr.logf("elanous: scale: %s snapshot up to index %d took %.0f ms", sp.Node, sp.Index, sp.DurationMs)
	}
	rep.LastSnapshotIndex = map[string]uint64{}
	for i, n := range s.nodes {
		if st, err := s.clusterStatus(ctx, i); err == nil {
			rep.LastSnapshotIndex[n.name], _ = raftStat(st, "last_snapshot_index")
		}
	}

	rep.Peaks = smp.stop()
	stopped = true
	for _, p := range rep.Peaks {
		pr.logf("elanous: scale: %s highest RSS %s, raft.db up to %s", p.Node, mib(p.HighestRSS()), mib(p.MaxDBBytes))
	}

	if rep.Restart, err = s.restartFollower(ctx); err != nil {
		return nil, fmt.Errorf("restart a follower: %w", err)
	}
	pr.logf("elanous: scale: %s stopped %.0f ms after SIGTERM, served /v1/ready %.0f ms after its start (RSS then %s)",
		rep.Restart.Node, rep.Restart.StopMs, rep.Restart.ReadyMs, mib(rep.Restart.RSSBytes))
	return rep, nil
}
