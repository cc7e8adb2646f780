package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// previousTerm is what a leader wrote before it was cut off: the records as
// it acknowledged them, the index of its last acknowledged entry and the
// cluster time (LastNow) after it.
type previousTerm struct {
	term      uint64
	lastIndex uint64
	lastNow   int64
	leases    map[int]fsm.PortLease
	resources map[string]fsm.Resource
}

// writePreviousTerm has the ready leader li register a few resources and
// acquire a few leases with long TTLs (so nothing is due during the test and
// no Sweep moves the cluster time), one after the other, and returns what
// it acknowledged.
func (tc *testCluster) writePreviousTerm(li int) previousTerm {
	tc.t.Helper()
	leader := tc.nodes[li]
	pt := previousTerm{term: leader.Raft().CurrentTerm(), leases: map[int]fsm.PortLease{}, resources: map[string]fsm.Resource{}}
	for i, ttl := range []int64{60_000, 600_000, 3_600_000, 86_400_000} {
		res := mustPropose(tc.t, leader, register(fmt.Sprintf("m%d", i), ttl))
		r := res.Value.(fsm.Resource)
		pt.resources[r.ID] = r
		pt.lastIndex = max(pt.lastIndex, res.Index)
	}
	for i, ttl := range []int64{60_000, 300_000, 3_600_000, 86_400_000} {
		res := mustPropose(tc.t, leader, acquire(fmt.Sprintf("o%d", i), ttl))
		l := res.Value.(fsm.PortLease)
		pt.leases[l.Port] = l
		pt.lastIndex = max(pt.lastIndex, res.Index)
	}
	pt.lastNow = leader.FSM().LastNow()
	return pt
}

// checkRebased fails the test unless node n holds every record of pt with
// the TTL it had left at the end of the previous term plus grace, counted
// from claim p: expiresAt = claimedAt + (old expiresAt − old lastNow) + grace.
func checkRebased(t *testing.T, n *Node, pt previousTerm, p fsm.Primary, grace time.Duration) {
	t.Helper()
	want := func(old int64) int64 { return p.ClaimedAt + (old - pt.lastNow) + grace.Milliseconds() }
	for id, old := range pt.resources {
		got, ok := n.FSM().Resource(id)
		switch {
		case !ok:
			t.Errorf("%s: resource %s of term %d missing after the claim", n.ID(), id, pt.term)
		case got.ExpiresAt != want(old.ExpiresAt):
			t.Errorf("%s: resource %s expiresAt = %d, want %d (%d ms left + %v grace after the claim at %d)",
				n.ID(), id, got.ExpiresAt, want(old.ExpiresAt), old.ExpiresAt-pt.lastNow, grace, p.ClaimedAt)
		}
	}
	for port, old := range pt.leases {
		got, ok := n.FSM().Lease(port)
		switch {
		case !ok:
			t.Errorf("%s: lease on port %d of term %d missing after the claim", n.ID(), port, pt.term)
		case got.LeaseID != old.LeaseID || got.Fence != old.Fence:
			t.Errorf("%s: lease on port %d = %+v, want the previous term's %+v", n.ID(), port, got, old)
		case got.ExpiresAt != want(old.ExpiresAt):
			t.Errorf("%s: lease on port %d expiresAt = %d, want %d (%d ms left + %v grace after the claim at %d)",
				n.ID(), port, got.ExpiresAt, want(old.ExpiresAt), old.ExpiresAt-pt.lastNow, grace, p.ClaimedAt)
		}
	}
}

// firstReady reports the primary claim node n's state machine shows at the
// first moment n accepts writes after it next wins an election. It waits for
// raft's observation that n leads, then polls readyLeadership without
// sleeping, so that moment is caught within microseconds of it. The channel
// is closed if n never becomes ready while the test runs.
func firstReady(t *testing.T, n *Node) <-chan fsm.Primary {
	ctx, cancel := context.WithCancel(context.Background())
	obs := make(chan raft.Observation, 4)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		return ok && string(lo.LeaderID) == n.ID()
	})
	n.Raft().RegisterObserver(observer)
	out := make(chan fsm.Primary, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		select {
		case <-obs:
		case <-ctx.Done():
			return
		}
		for ctx.Err() == nil {
			if _, err := n.readyLeadership(); err == nil {
				out <- n.FSM().Primary()
				return
			}
			runtime.Gosched()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		n.Raft().DeregisterObserver(observer)
	})
	return out
}

// ownClaim is a node's own ClaimPrimary as it reached the node's state
// machine.
type ownClaim struct {
	node  int
	claim fsm.ClaimPrimary
	// wall is the node's wall clock (Config.WallClock, Unix ms) at that
	// moment, read after the claim was stamped: its latest possible time.
	wall int64
}

// claimGate holds an entry back with Config.beforeApply, the package's seam
// for a claim committed but not applied. It watches each node's state machine
// reach a claim of its own (the node leads and is about to apply its claim).
// Until armed it does nothing, so the first election goes by; once armed it
// records every such claim and, if it holds, keeps the claim from being
// applied until open: the node has won and its claim is committed, yet it
// has not applied it. A test that holds must open it before the cluster's
// Close (which a held state machine blocks): defer open right away.
type claimGate struct {
	hold    bool
	armed   atomic.Bool
	release chan struct{}
	opened  sync.Once
	mu      sync.Mutex
	claims  []ownClaim
}

func newClaimGate(hold bool) *claimGate {
	return &claimGate{hold: hold, release: make(chan struct{})}
}

// install sets node i's hook; it must be the last tweak of its Config, so
// that it reads the node's own wall clock.
func (g *claimGate) install(i int, c *Config) {
	id, clock := c.ID, c.WallClock
	if clock == nil {
		clock = systemWallClock // what setDefaults gives the node
	}
	c.beforeApply = func(l *raft.Log) {
		if !g.armed.Load() || l.Type != raft.LogCommand {
			return
		}
		cmd, known, err := fsm.Decode(l.Data)
		claim, ok := cmd.(fsm.ClaimPrimary)
		if err != nil || !known || !ok || claim.Holder != id {
			return
		}
		g.mu.Lock()
		g.claims = append(g.claims, ownClaim{node: i, claim: claim, wall: clock().UnixMilli()})
		g.mu.Unlock()
		if g.hold {
			<-g.release
		}
	}
}

func (g *claimGate) arm()  { g.armed.Store(true) }
func (g *claimGate) open() { g.opened.Do(func() { close(g.release) }) }

// first waits for the first claim recorded since the gate was armed of node
// i, or of any node if i is -1.
func (g *claimGate) first(t *testing.T, i int) ownClaim {
	t.Helper()
	var c ownClaim
	testutil.WaitFor(t, "a new leader's claim to reach its state machine", 10*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, rc := range g.claims {
			if i < 0 || rc.node == i {
				c = rc
				return true
			}
		}
		return false
	})
	return c
}

// checkClaimTime fails the test unless claim p was stamped with the new
// leader's own clock: not before its wall clock read before the election
// (before), and not after the moment its claim reached its state machine
// (c.wall), allowing only the rounding to milliseconds.
func checkClaimTime(t *testing.T, p fsm.Primary, c ownClaim, before int64) {
	t.Helper()
	if c.claim.Now != p.ClaimedAt {
		t.Errorf("the claim entry is stamped %d, the applied claim says %d", c.claim.Now, p.ClaimedAt)
	}
	if p.ClaimedAt < before || p.ClaimedAt > c.wall+1 {
		t.Errorf("claim stamped %d, want within the new leader's wall clock over the election [%d, %d]: %+d ms after it",
			p.ClaimedAt, before, c.wall, p.ClaimedAt-c.wall)
	}
}

// A new leader's ClaimPrimary comes after every entry of the previous term:
// its index is above the old leader's last acknowledged entry, the state it
// rebases holds every record of that term, and the new leader accepts writes
// only once its claim is applied: its claim is held back, committed but not
// applied, and meanwhile the leader refuses every write as not ready. The
// claim carries the new leader's clock at the time. The old leader is cut
// off right after its last acknowledgement, so the survivors learn that the
// last entries are committed only from the new leader: they may not have
// applied them when it wins.
func TestNode_ClaimFollowsThePreviousTerm(t *testing.T) {
	gate := newClaimGate(true)
	defer gate.open() // deferred calls run before the cluster's cleanup
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		slowTimeouts(300*time.Millisecond, 150*time.Millisecond)(i, c)
		gate.install(i, c)
	})
	li := tc.readyLeader()
	pt := tc.writePreviousTerm(li)
	ready := map[int]<-chan fsm.Primary{}
	before := map[int]int64{} // each survivor's wall clock before the election
	for i, n := range tc.nodes {
		if i != li {
			ready[i] = firstReady(t, n)
			before[i] = n.cfg.WallClock().UnixMilli()
		}
	}
	gate.arm()
	tc.isolate(li)
	for i, n := range tc.nodes {
		if i != li {
			t.Logf("%s had applied index %d of %d when the leader was cut off", n.ID(), n.FSM().AppliedIndex(), pt.lastIndex)
		}
	}

	// The winner's claim is committed and held before its state machine
	// applies it: the winner must not serve yet.
	held := gate.first(t, -1)
	next := tc.nodes[held.node]
	if _, err := next.readyLeadership(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("%s with its claim unapplied: readyLeadership() error = %v, want ErrNotReady", next.ID(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := next.Propose(ctx, acquire("before-claim", 60_000)); !errors.Is(err, ErrNotReady) {
		t.Fatalf("%s with its claim unapplied: Propose() error = %v, want ErrNotReady", next.ID(), err)
	}
	if err := next.ReadIndex(ctx); !errors.Is(err, ErrNotReady) {
		t.Fatalf("%s with its claim unapplied: ReadIndex() error = %v, want ErrNotReady", next.ID(), err)
	}
	if next.Ready() {
		t.Fatalf("%s with its claim unapplied: Ready() = true", next.ID())
	}
	if p := next.FSM().Primary(); p.Generation > pt.term {
		t.Fatalf("%s applied claim %+v while it was held", next.ID(), p)
	}
	gate.open()

	ni := tc.readyLeader(li)
	if ni != held.node {
		t.Fatalf("ready leader is %s, want %s, whose claim was held", tc.nodes[ni].ID(), next.ID())
	}
	p := next.FSM().Primary()
	if p.Holder != next.ID() || p.Generation <= pt.term {
		t.Fatalf("Primary() on the new leader = %+v, want %s's claim in a term after %d", p, next.ID(), pt.term)
	}
	if p.Index <= pt.lastIndex {
		t.Fatalf("claim index = %d, want above the previous term's last acknowledged entry %d", p.Index, pt.lastIndex)
	}
	checkClaimTime(t, p, held, before[ni])
	checkRebased(t, next, pt, p, next.cfg.Grace)
	select {
	case first := <-ready[ni]:
		if first != p {
			t.Fatalf("at the first moment %s accepted writes its state showed claim %+v, want its own %+v", next.ID(), first, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s leads and is ready, but its first ready moment was not observed", next.ID())
	}

	// The first write the new leader accepts lands after its claim.
	res := mustPropose(t, next, acquire("after-claim", 60_000))
	if res.Index <= p.Index {
		t.Fatalf("first write after the claim has index %d, want above the claim's %d", res.Index, p.Index)
	}

	// The other survivor applies the same claim on the same state.
	for i, n := range tc.nodes {
		if i == li || i == ni {
			continue
		}
		testutil.WaitFor(t, n.ID()+" to apply the first write after the claim", 5*time.Second, func() bool {
			return n.FSM().AppliedIndex() >= res.Index
		})
		if got := n.FSM().Primary(); got != p {
			t.Errorf("%s: Primary() = %+v, want the new leader's %+v", n.ID(), got, p)
		}
		checkRebased(t, n, pt, p, next.cfg.Grace)
	}
}
