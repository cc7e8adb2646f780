package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// A leader cut off from the majority still believes it leads for its lease
// (500 ms here), and its own commit index is applied: a ReadIndex that
// trusted either would let a read miss what the majority commits meanwhile.
// ReadIndex must confirm leadership with a quorum, so on the cut-off leader
// it fails, both while it still believes it leads and after the majority has
// moved on; once healed the same read, through the new leader, sees the
// majority's write.
//
// The first ReadIndex is made once a heartbeat to each peer has failed:
// raft counts any heartbeat answered after the read started, and one sent
// just before the cut may still be answered.
func TestNode_ReadIndexOnAPartitionedLeader(t *testing.T) {
	tc := newTestCluster(t, 3, slowTimeouts(500*time.Millisecond, 500*time.Millisecond))
	li, old := tc.leader()
	if err := old.ReadIndex(context.Background()); err != nil {
		t.Fatalf("ReadIndex() on the connected leader error = %v", err)
	}

	tc.isolateLeader(t, li)
	// The deadline leaves room for the lease to run out; the answer must be
	// an error, not nil, however long it takes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.ReadIndex(ctx); !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) {
		t.Fatalf("ReadIndex() on the cut-off leader error = %v, want ErrNotLeader or ErrNoLeader", err)
	}

	ni := tc.readyLeader(li)
	next := tc.nodes[ni]
	res := mustPropose(t, next, register("fresh", 60_000))
	if err := old.ReadIndex(ctx); !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) {
		t.Fatalf("ReadIndex() on the cut-off node after the majority's write error = %v, want ErrNotLeader or ErrNoLeader", err)
	}
	if _, ok := old.FSM().Resource("machine:fresh"); ok {
		t.Fatalf("the cut-off node holds the majority's write: the partition leaks")
	}

	tc.heal()
	testutil.WaitFor(t, "the old leader to follow "+next.ID(), 10*time.Second, func() bool {
		leader, ok := old.Leader()
		return ok && leader.Machine == next.ID()
	})
	if err := old.ReadIndex(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ReadIndex() on the healed follower error = %v, want ErrNotLeader (forward to the leader)", err)
	}
	if err := next.ReadIndex(ctx); err != nil {
		t.Fatalf("ReadIndex() on the new leader error = %v", err)
	}
	if r, ok := next.FSM().Resource("machine:fresh"); !ok || r.Revision != res.Index {
		t.Fatalf("read after ReadIndex() on the new leader = %+v, %v, want the write at index %d", r, ok, res.Index)
	}
}

// A leader that still believes it leads after the cluster moved on must not
// refuse a command from its stale state (a release answered 409
// lease-mismatch while the new leader holds that lease). A refusal is a read,
// so Precheck confirms it as a ReadIndex does; on the cut-off leader that
// fails, and Precheck leaves the verdict to Propose. The same refusal on a
// leader that can reach its quorum is answered.
func TestNode_PrecheckClockSkewDeposedLeaderRefusesNothing(t *testing.T) {
	tc := newTestCluster(t, 3, slowTimeouts(500*time.Millisecond, 500*time.Millisecond))
	li, old := tc.leader()
	unknown := fsm.HeartbeatResource{Caller: fsm.Caller{Owner: "o1"}, ID: "machine:nobody"}
	if err := old.Precheck(context.Background(), unknown); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("Precheck(heartbeat of an unknown id) on the connected leader = %v, want %v", err, fsm.ErrNotFound)
	}

	tc.isolateLeader(t, li)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Precheck(ctx, unknown); err != nil {
		t.Fatalf("Precheck() on the cut-off leader = %v, want nil (it cannot confirm it still leads)", err)
	}
}

// isolateLeader cuts off node li, the leader, and returns once a heartbeat
// from it to each peer has failed while it still believes it leads (raft
// counts any heartbeat answered after a read started, and one sent just
// before the cut may still be answered). The cluster's leader lease must be
// long enough (500 ms with slowTimeouts) for the node to still lead then.
func (tc *testCluster) isolateLeader(t *testing.T, li int) {
	t.Helper()
	old := tc.nodes[li]
	failed := make(chan raft.Observation, 64)
	observer := raft.NewObserver(failed, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.FailedHeartbeatObservation)
		return ok
	})
	old.Raft().RegisterObserver(observer)
	defer old.Raft().DeregisterObserver(observer)
	tc.isolate(li)
	cut := map[raft.ServerID]bool{}
	testutil.WaitFor(t, "a failed heartbeat from the cut-off leader to each peer", 5*time.Second, func() bool {
		for {
			select {
			case o := <-failed:
				cut[o.Data.(raft.FailedHeartbeatObservation).PeerID] = true
			default:
				return len(cut) == len(tc.nodes)-1
			}
		}
	})
	if _, err := old.readyLeadership(); err != nil {
		t.Fatalf("setup: the leader stopped leading as soon as it was cut off (%v); its lease is 500 ms", err)
	}
}
