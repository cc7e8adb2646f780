package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
)

// The leader judges a heartbeat against its applied state and refuses one
// for a resource that does not exist without a log entry; a follower does
// not judge (the write is forwarded and the leader decides).
func TestNode_Precheck(t *testing.T) {
	// No periodic sweep: the log grows only by what the test proposes.
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.SweepInterval = time.Hour })
	li, leader := tc.leader()
	testutil.WaitFor(t, "format level 2", 5*time.Second, func() bool { return leader.FSM().Format() >= 2 })
	caller := fsm.Caller{Owner: "o1"}
	const m2sum = "2222222222222222222222222222222222222222222222222222222222222222"
	mustPropose(t, leader, fsm.IssueToken{Machine: "m2", SHA256: m2sum})
	mustPropose(t, leader, register("m1", 60_000))
	follower := tc.nodes[(li+1)%3]
	testutil.WaitFor(t, "the follower applied the register", 5*time.Second, func() bool {
		_, ok := follower.FSM().Resource("machine:m1")
		return ok
	})

	tests := []struct {
		name string
		node *Node
		cmd  fsm.Command
		want error
	}{
		{"leader, unknown id", leader, fsm.HeartbeatResource{Caller: caller, ID: "machine:nope"}, fsm.ErrNotFound},
		{"leader, delete of an unknown id", leader, fsm.DeleteResource{Caller: caller, ID: "machine:nope"}, fsm.ErrNotFound},
		{"leader, live record", leader, fsm.HeartbeatResource{Caller: caller, ID: "machine:m1"}, nil},
		{"leader, another machine's record", leader, fsm.HeartbeatResource{Caller: fsm.Caller{Owner: "o2", Machine: "m2", TokenSHA256: m2sum}, ID: "machine:m1"}, fsm.ErrForbidden},
		{"leader, a token never issued", leader, fsm.HeartbeatResource{Caller: fsm.Caller{Owner: "o3", Machine: "m1", TokenSHA256: m2sum}, ID: "machine:m1"}, fsm.ErrTokenRevoked},
		{"leader, a lease nobody holds", leader, fsm.RenewLease{Caller: caller, Port: 31460, LeaseID: "x"}, fsm.ErrNotFound},
		{"follower, unknown id", follower, fsm.HeartbeatResource{Caller: caller, ID: "machine:nope"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := leader.Raft().LastIndex()
			err := tt.node.Precheck(context.Background(), tt.cmd)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Precheck(%T) = %v, want %v", tt.cmd, err, tt.want)
			}
			if after := leader.Raft().LastIndex(); after != before {
				t.Errorf("Precheck added log entries: last index %d, then %d", before, after)
			}
		})
	}
}

// A follower that has applied every entry it holds does not lag, barrier
// entries (which the state machine never sees) included.
func TestNode_Lagging(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.SweepInterval = time.Hour })
	_, leader := tc.leader()
	mustPropose(t, leader, register("m1", 60_000))
	before := leader.Raft().LastIndex()
	leader.announceBarrier()
	testutil.WaitFor(t, "the barrier entry", 5*time.Second, func() bool { return leader.Raft().LastIndex() > before })
	last := leader.Raft().LastIndex()
	for _, n := range tc.nodes {
		testutil.WaitFor(t, n.ID()+" caught up", 5*time.Second, func() bool {
			return n.Raft().LastIndex() >= last && !n.Lagging()
		})
	}
}
