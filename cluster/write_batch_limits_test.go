package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
)

// A command that cannot be part of a batch (a limits change) proposed among
// concurrent writes goes out alone: it is applied, and the writes queued
// with it are not refused for its sake.
func TestNode_UnbatchableAmongBatches(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li := tc.readyLeader()
	leader := tc.nodes[li]
	tc.waitFormat(li, fsm.MaxFormat)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for round := range 5 {
		for w := range 32 {
			wg.Go(func() {
				id := fmt.Sprintf("instance:r%d-w%02d", round, w)
				cmd := fsm.RegisterResource{Caller: fsm.Caller{Owner: "o1"}, ID: id, Kind: "instance", Name: id, Machine: fmt.Sprintf("m%02d", w), TTLMs: 60_000}
				if _, err := leader.Propose(ctx, cmd); err != nil {
					errs <- fmt.Errorf("register %s: %w", id, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := leader.Propose(ctx, fsm.SetLimits{Limits: fsm.Limits{ResourcesPerMachine: 100 + round}}); err != nil {
				errs <- fmt.Errorf("set limits: %w", err)
			}
		})
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Errorf("Propose() error = %v", err)
	}
	if batches, _ := leader.BatchStats(); batches == 0 {
		t.Errorf("no batch was formed: the test did not exercise batching")
	}
	if got := leader.FSM().ConfiguredLimits().ResourcesPerMachine; got < 100 {
		t.Errorf("limits after the changes = %d, want one of them applied", got)
	}
}
