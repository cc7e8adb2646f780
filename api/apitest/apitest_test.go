package apitest_test

import (
	"context"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
)

func TestCluster_RestartedNodeCatchesUp(t *testing.T) {
	// The production raft timeouts: with 100 ms ones a loaded machine now and
	// then deposed the new leader while it committed the write below.
	c := apitest.Start(t, apitest.Options{Timeout: 500 * time.Millisecond})
	l := c.Leader()
	acquire := fsm.AcquireLease{Caller: fsm.Caller{Owner: "o"}, LeaseID: "l1", Machine: "m", Purpose: "p",
		TTLMs: 60_000, BandStart: 31450, BandEnd: 31499}
	if _, err := c.Nodes[l].Node.Propose(context.Background(), acquire); err != nil {
		t.Fatalf("Propose() error = %v", err)
	}
	c.StopNode(l)
	l2 := c.Leader()
	acquire.LeaseID = "l2"
	if _, err := c.Nodes[l2].Node.Propose(context.Background(), acquire); err != nil {
		t.Fatalf("Propose() after failover error = %v", err)
	}
	c.RestartNode(l)
	c.WaitReady()
	c.WaitApplied()
	if got := len(c.Nodes[l].Node.FSM().Leases()); got != 2 {
		t.Fatalf("restarted node has %d leases, want 2", got)
	}
	c.WaitFor("same state hash", 5*time.Second, func() bool {
		return c.Nodes[l].Node.FSM().Hash() == c.Nodes[c.Leader()].Node.FSM().Hash()
	})
}
