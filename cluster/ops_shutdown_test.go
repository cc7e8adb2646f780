package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Closing the leader hands leadership over: the next leader wins the very
// next term with a vote request marked as a leadership transfer (raft's
// TimeoutNow path, which skips the pre-vote), not through an election after
// its heartbeat timeout. The 500 ms timeouts keep a spontaneous election out
// of the way; the observation, not the time it took, is what the test checks.
func TestNode_CloseHandsOverLeadership(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
	})
	li, old := tc.leader()
	term := old.Raft().CurrentTerm()

	// Every vote request the other nodes receive from now on.
	votes := make(chan raft.Observation, 64)
	isVote := func(o *raft.Observation) bool { _, ok := o.Data.(raft.RequestVoteRequest); return ok }
	for i, n := range tc.nodes {
		if i != li {
			n.Raft().RegisterObserver(raft.NewObserver(votes, false, isVote))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := old.Close(ctx); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	tc.nodes[li] = nil
	next := tc.nodes[tc.readyLeader(li)]
	p := next.FSM().Primary()
	if p.Holder != next.ID() || p.Generation != term+1 {
		t.Errorf("Primary() after Close = %+v, want %s in term %d, the one right after the closed leader's %d", p, next.ID(), term+1, term)
	}
	var seen []string
	for len(votes) > 0 {
		req := (<-votes).Data.(raft.RequestVoteRequest)
		if string(req.ID) == next.ID() && req.Term == p.Generation && req.LeadershipTransfer {
			return
		}
		seen = append(seen, fmt.Sprintf("{from %s, term %d, transfer %v}", req.ID, req.Term, req.LeadershipTransfer))
	}
	t.Fatalf("%s won term %d without a leadership-transfer vote request from %s; vote requests seen: %v",
		next.ID(), p.Generation, next.ID(), seen)
}
