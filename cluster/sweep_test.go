package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// A leader cut off from the majority keeps leading for its lease (1 s here)
// and, when records fall due in that time, proposes Sweeps. They cannot
// commit: nothing expires, on the majority nor on the deposed leader itself.
// The new leader's claim gives every record its remaining TTL plus grace,
// and after the partition heals the deposed leader's sweeps are gone from
// the log and every node holds every record until the rebased expiry.
func TestNode_DeposedLeaderSweepsNeverCommit(t *testing.T) {
	const grace = 30 * time.Second // longer than the test: nothing may expire before it ends
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		slowTimeouts(time.Second, time.Second)(i, c)
		c.Grace = grace
	})
	li, old := tc.leader()

	// Records due 300 ms from now, well within the lease the leader keeps
	// after it is cut off.
	var last uint64
	leases := map[int]string{}
	for i := range 3 {
		res := mustPropose(t, old, acquire(fmt.Sprintf("o%d", i), 300))
		l := res.Value.(fsm.PortLease)
		leases[l.Port], last = l.LeaseID, res.Index
	}
	last = mustPropose(t, old, register("m1", 300)).Index
	tc.isolate(li)

	holdsAll := func(n *Node) error {
		for port, id := range leases {
			if l, ok := n.FSM().Lease(port); !ok || l.LeaseID != id {
				return fmt.Errorf("%s lost the lease on port %d", n.ID(), port)
			}
		}
		if _, ok := n.FSM().Resource("machine:m1"); !ok {
			return fmt.Errorf("%s lost resource machine:m1", n.ID())
		}
		return nil
	}

	// The deposed leader tries to sweep what fell due on its clock...
	var proposed []raft.Log
	testutil.WaitFor(t, "the cut-off leader to propose a Sweep", 10*time.Second, func() bool {
		proposed = tc.commandsAfter(li, last, fsm.SweepType)
		return len(proposed) > 0
	})
	// ...and, once it has stepped down, has applied none of them.
	testutil.WaitFor(t, "the cut-off leader to step down", 10*time.Second, func() bool { return !old.IsLeader() })
	proposed = tc.commandsAfter(li, last, fsm.SweepType)
	if err := holdsAll(old); err != nil {
		t.Fatalf("deposed leader: %v: its Sweep %d applied without a quorum", err, proposed[0].Index)
	}
	if got := old.FSM().AppliedIndex(); got != last {
		t.Fatalf("deposed leader applied index %d, want %d (its last committed entry)", got, last)
	}

	ni := tc.readyLeader(li)
	next := tc.nodes[ni]
	p := next.FSM().Primary()
	if err := holdsAll(next); err != nil {
		t.Fatalf("new leader: %v", err)
	}
	for port := range leases {
		if l, _ := next.FSM().Lease(port); l.ExpiresAt < p.ClaimedAt+grace.Milliseconds() {
			t.Errorf("new leader: lease on port %d expires at %d, before the claim at %d plus the grace %v", port, l.ExpiresAt, p.ClaimedAt, grace)
		}
	}

	tc.heal()
	testutil.WaitFor(t, "the deposed leader to follow "+next.ID(), 10*time.Second, func() bool {
		leader, ok := old.Leader()
		return ok && leader.Machine == next.ID() && old.FSM().AppliedIndex() >= p.Index
	})
	// One committed write after the heal: every node applies it on one history.
	res := mustPropose(t, next, acquire("after-heal", 60_000))
	for _, n := range tc.nodes {
		testutil.WaitFor(t, n.ID()+" to apply the write after the heal", 10*time.Second, func() bool {
			return n.FSM().AppliedIndex() >= res.Index
		})
		if err := holdsAll(n); err != nil {
			t.Errorf("after the heal: %v (expired early)", err)
		}
		if got, want := n.FSM().Hash(), next.FSM().Hash(); got != want {
			t.Errorf("after the heal %s state hash = %s, want the leader's %s", n.ID(), got, want)
		}
	}
	// The deposed leader's sweeps were replaced, not committed.
	for _, s := range proposed {
		var entry raft.Log
		if err := tc.stores[ni].Logs.GetLog(s.Index, &entry); err == nil && entry.Term == s.Term {
			t.Errorf("the deposed leader's Sweep at index %d (term %d) is in the new leader's log", s.Index, s.Term)
		}
	}
}
