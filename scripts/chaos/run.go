package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/scripts/chaos/harness"
	"github.com/elanous/elanous-node/scripts/chaos/netns"
	"github.com/elanous/elanous-node/scripts/chaos/workload"
	"github.com/elanous/elanous-node/wire"
)

// env is what a scenario's faults act on.
type env struct {
	s     *suite
	name  string
	c     *harness.Cluster
	net   *netns.Net
	mu    sync.Mutex
	notes []string // guarded by mu
	// violations are found by the scenario's faults (the abuse scenario's
	// checks); guarded by mu.
	violations []check.Violation
	// fill and free, set by the disk-full scenario's mounts.
	disks *disks
	// dock is the container backend (nil for namespaces).
	dock *dockerEnv
	// skews are the clock offsets given to any node (check.Clock); guarded
	// by mu.
	skews []time.Duration
}

// setClockOffset gives node i a clock offset and remembers it for the
// renewal check.
func (e *env) setClockOffset(i int, d time.Duration) error {
	e.mu.Lock()
	if !slices.Contains(e.skews, d) {
		e.skews = append(e.skews, d)
	}
	e.mu.Unlock()
	return e.c.SetClockOffset(i, d)
}

func (e *env) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.s.logf("[%s] %s", e.name, msg)
}

// sleep waits d or until ctx is done; it reports whether the full time passed.
func (e *env) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// leader waits for a ready leader (other than any in not).
func (e *env) leader(ctx context.Context, not ...int) (int, error) {
	l, err := e.c.WaitLeader(ctx, 20*time.Second, not...)
	if err == nil {
		e.logf("leader is %s", e.c.Nodes[l].Name)
	}
	return l, err
}

// heal removes every fault: network rules, paused and stopped processes,
// clock offsets, filled disks.
func (e *env) heal() {
	if e.dock != nil {
		e.dock.heal(context.Background())
		return
	}
	if e.net != nil {
		if err := e.net.Heal(); err != nil {
			e.logf("heal network: %v", err)
		}
	}
	if e.disks != nil {
		e.disks.freeAll()
	}
	for i := range e.c.Nodes {
		e.c.Resume(i)
		_ = e.c.SetClockOffset(i, 0)
		if !e.c.Running(i) {
			if err := e.c.Start(i); err != nil {
				e.logf("restart %s: %v", e.c.Nodes[i].Name, err)
			}
		}
	}
}

// leaderMonitor counts leadership changes: the (leader, term) pairs seen by
// polling every node's status.
type leaderMonitor struct {
	mu      sync.Mutex
	last    string // guarded by mu
	changes int    // guarded by mu
}

func (m *leaderMonitor) run(ctx context.Context, c *harness.Cluster) {
	for ctx.Err() == nil {
		var term uint64
		leader := ""
		for _, st := range c.Statuses(ctx) {
			if st != nil && st.State == "Leader" && st.Term >= term {
				term, leader = st.Term, st.Machine
			}
		}
		if leader != "" {
			key := fmt.Sprintf("%s@%d", leader, term)
			m.mu.Lock()
			if m.last != "" && key != m.last {
				m.changes++
			}
			m.last = key
			m.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (m *leaderMonitor) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes
}

// runScenario runs one scenario on a fresh cluster and checks it.
func (s *suite) runScenario(ctx context.Context, sc scenario, round int) row {
	start := time.Now()
	name := sc.runName()
	r := row{Name: name}
	dir := filepath.Join(s.root, fmt.Sprintf("%s-%d", name, round))
	s.logf("=== %s (round %d): %s", name, round, sc.about)
	var h []check.Op
	var final finalState
	var mon leaderMonitor
	var err error
	if sc.docker {
		h, final, err = s.runDocker(ctx, sc, dir, &mon)
	} else {
		h, final, err = s.runNetns(ctx, sc, dir, &mon)
	}
	if err != nil {
		r.Error = err.Error()
	}
	r.LeaderChanges = mon.count()
	stats(&r, h, final.from, final.to)
	if len(h) > 0 {
		s.logf("[%s] checking %d operations", name, len(h))
		res := check.Check(h, check.Options{OutDir: dir, Timeout: 90 * time.Second, Clock: final.clock})
		r.Linearizable = res.Linearizable
		r.Details = append(r.Details, res.Violations...)
		for _, n := range res.Notes {
			s.logf("[%s] note: %s", name, n)
		}
		rs := check.SummarizeRenewals(h, final.clock)
		s.logf("[%s] renewal check: %d lives, %d acknowledged answers (%d with a mapped expiresAt), %d seen gone; the closest came %d ms after its send + TTL",
			name, rs.Lives, rs.Answers, rs.Mapped, rs.Gone, rs.ClosestMs)
		if final.ok {
			r.Details = append(r.Details, check.CheckFinal(h, final.leases, final.resources)...)
		}
	}
	r.Details = append(r.Details, final.violations...)
	r.Violations = len(r.Details)
	r.Seconds = time.Since(start).Seconds()
	if passed(r) && !s.opt.keep {
		_ = os.RemoveAll(dir)
	} else {
		_ = saveHistory(filepath.Join(dir, "history.jsonl"), h)
		_ = writeJSON(filepath.Join(dir, "violations.json"), map[string]any{"error": r.Error, "violations": r.Details, "clock": final.clock})
		r.Dir = dir
	}
	slow := 0
	for _, o := range h {
		if (o.Kind == check.LeaseRenew || o.Kind == check.LeaseRelease) && o.Status == 0 && strings.Contains(o.Code, "deadline exceeded") {
			slow++
		}
	}
	if slow > 0 {
		s.logf("[%s] note: %d lease heartbeats/releases got no answer within the client's 1 s (the contract: answer within 1 s or fail fast with 503)", name, slow)
	}
	verdict := "pass"
	if !passed(r) {
		verdict = "FAIL (kept " + dir + ")"
	}
	s.logf("=== %s: %d ops (%d ok, %d failed, %d indeterminate), linearizable=%v, violations=%d, max unavailable %dms, %d leader changes: %s",
		name, r.Ops, r.OK, r.Failed, r.Indeterminate, r.Linearizable, r.Violations, r.MaxUnavailableMs, r.LeaderChanges, verdict)
	return r
}

// finalState is what the cluster held after healing.
type finalState struct {
	ok         bool
	leases     []wire.PortLease
	resources  []wire.Resource
	violations []check.Violation
	from, to   int64  // the workload's window on the recorder's clock
	committed  uint64 // the lowest applied index any node reported at the end
	clock      check.Clock
}

// runNetns runs a scenario on processes in namespaces.
func (s *suite) runNetns(ctx context.Context, sc scenario, dir string, mon *leaderMonitor) ([]check.Op, finalState, error) {
	var fs finalState
	n := s.opt.nodes
	if sc.nodes > 0 {
		n = sc.nodes
	}
	nt, err := netns.Setup(n)
	if err != nil {
		return nil, fs, err
	}
	defer nt.Close()
	e := &env{s: s, name: sc.runName(), net: nt}
	var ips []string
	for _, h := range nt.Hosts {
		ips = append(ips, h.IP)
	}
	cfg := harness.Config{Bin: s.bin, Dir: dir, IPs: ips, Launch: nt.Command, ElectionTimeout: s.opt.electionTimeout, TLS: sc.tls}
	if sc.smallDisks {
		e.disks = &disks{}
		cfg.DataMount = e.disks.mount
		defer e.disks.unmountAll()
	}
	c, err := harness.New(cfg)
	if err != nil {
		return nil, fs, err
	}
	e.c = c
	defer c.Close()
	for i := range c.Nodes {
		if err := c.Start(i); err != nil {
			return nil, fs, err
		}
	}
	if _, err := e.leader(ctx); err != nil {
		return nil, fs, fmt.Errorf("cluster did not elect a leader: %w", err)
	}
	h, fs, err := s.drive(ctx, sc, e, mon)
	// Raft's Log Matching property, read from the stopped nodes' log stores:
	// a divergence here is a consensus bug whatever the state hashes say.
	c.Close()
	if fs.committed > 0 {
		if diff, cerr := c.CompareLogs(fs.committed); cerr != nil {
			e.logf("compare raft logs: %v", cerr)
		} else if diff != "" {
			fs.violations = append(fs.violations, check.Violation{Kind: "log-diverged", Detail: diff})
		}
	}
	return h, fs, err
}

// drive runs the workload and the faults, heals, and reads the final state.
func (s *suite) drive(ctx context.Context, sc scenario, e *env, mon *leaderMonitor) ([]check.Op, finalState, error) {
	var fs finalState
	rec := workload.NewRecorder()
	wcfg := workload.Config{Targets: targets(e.c), Tokens: e.c.Tokens, Clients: s.opt.clients,
		Seed: s.opt.seed, TLS: e.c.ClientTLS()}
	if sc.renewals {
		wcfg.Renewers = renewers
	}
	wl := workload.New(wcfg, rec)
	dur := max(s.opt.duration, sc.minDuration)
	wctx, wcancel := context.WithTimeout(ctx, dur)
	defer wcancel()
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go mon.run(mctx, e.c)
	fs.from = rec.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wl.Run(wctx)
	}()
	fctx, fcancel := context.WithTimeout(wctx, dur*3/4)
	ferr := sc.faults(fctx, e)
	fcancel()
	if ferr != nil && !errors.Is(ferr, context.DeadlineExceeded) && !errors.Is(ferr, context.Canceled) {
		e.logf("fault injection: %v", ferr)
	}
	e.logf("healing")
	e.heal()
	wg.Wait()
	fs.to = rec.Now()
	mcancel()
	e.mu.Lock()
	fs.violations = append(fs.violations, e.violations...)
	fs.clock = check.Clock{WallStartMs: rec.WallStartMs(), Skews: append([]time.Duration{0}, e.skews...)}
	e.mu.Unlock()
	if n := mon.count(); sc.stableLeader && n > 0 {
		fs.violations = append(fs.violations, check.Violation{Kind: "leader-changed",
			Detail: fmt.Sprintf("%d leadership changes; the scenario must keep its leader", n)})
	}
	if ctx.Err() != nil {
		return rec.Ops(), fs, ctx.Err()
	}
	e.logf("workload done; waiting for a leader and convergence")
	var errs []error
	if _, err := e.leader(ctx); err != nil {
		errs = append(errs, fmt.Errorf("after healing: %w", err))
	}
	sts, err := e.c.WaitConverged(ctx, 60*time.Second)
	for _, st := range sts {
		if st != nil && (fs.committed == 0 || st.AppliedIndex < fs.committed) {
			fs.committed = st.AppliedIndex
		}
	}
	if err != nil {
		kind := "not-converged"
		if errors.Is(err, harness.ErrDiverged) {
			kind = "state-diverged"
		}
		fs.violations = append(fs.violations, check.Violation{Kind: kind, Detail: err.Error()})
	} else {
		e.logf("converged at index %d, state hash %.12s", sts[0].AppliedIndex, sts[0].StateHash)
	}
	for i := range e.c.Nodes {
		ls, rs, err := wl.FinalRead(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !fs.ok {
			fs.ok, fs.leases, fs.resources = true, ls, rs
		}
	}
	if sc.renewals {
		e.logf("%s", renewalCounts(ctx, e.c, rec.Ops()))
	}
	for _, line := range e.c.PanicLines() {
		fs.violations = append(fs.violations, check.Violation{Kind: "panic", Detail: line})
	}
	return rec.Ops(), fs, errors.Join(errs...)
}
