package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
)

// waitFormat waits until node i has applied format level want.
func (tc *testCluster) waitFormat(i, want int) {
	tc.t.Helper()
	testutil.WaitFor(tc.t, fmt.Sprintf("format level %d on %s", want, tc.cfgs[i].ID), 10*time.Second, func() bool {
		return tc.nodes[i].FSM().Format() == want
	})
}

// Concurrent proposals share entries, and every caller gets the result of
// its own command: its own resource, its own refusal, its own lease with a
// fence no other grant has.
func TestNode_GroupCommit(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	tc.waitFormat(li, fsm.MaxFormat)

	const writers = 48
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type outcome struct {
		id      string
		applied Applied
		err     error
	}
	results := make(chan outcome, 3*writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("instance:w%02d", w)
			for round := range 3 {
				var cmd fsm.Command
				switch round {
				case 0:
					cmd = fsm.RegisterResource{Caller: fsm.Caller{Owner: "o1"}, ID: id, Kind: "instance", Name: id, Machine: "m", TTLMs: 60_000}
				case 1:
					cmd = fsm.HeartbeatResource{Caller: fsm.Caller{Owner: "o1"}, ID: id + "-missing"}
				case 2:
					a := acquire(fmt.Sprintf("owner-%02d", w), 60_000)
					a.Machine = fmt.Sprintf("m%02d", w) // a machine holds at most a quarter of the band
					cmd = a
				}
				a, err := leader.Propose(ctx, cmd)
				results <- outcome{id: id, applied: a, err: err}
			}
		}()
	}
	wg.Wait()
	close(results)

	fences := map[uint64]string{}
	granted, exhausted := 0, 0
	for r := range results {
		switch v := r.applied.Value.(type) {
		case fsm.Resource:
			if r.err != nil || v.ID != r.id {
				t.Errorf("register %s = %v, %v, want its own resource", r.id, v.ID, r.err)
			}
		case fsm.PortLease:
			granted++
			if other, dup := fences[v.Fence]; dup {
				t.Errorf("fence %d granted to %s and %s", v.Fence, other, v.Owner)
			}
			fences[v.Fence] = v.Owner
			if v.Fence != r.applied.Index {
				t.Errorf("lease fence %d, entry index %d: want them equal", v.Fence, r.applied.Index)
			}
		case nil:
			switch {
			case errors.Is(r.err, fsm.ErrNotFound):
				// the heartbeat of a resource that does not exist
			case errors.Is(r.err, fsm.ErrBandExhausted):
				exhausted++ // 48 writers, 50 ports less the ones taken
			default:
				t.Errorf("%s: result %v, error %v", r.id, r.applied.Value, r.err)
			}
		default:
			t.Errorf("%s: unexpected result %T", r.id, v)
		}
		if r.applied.Index == 0 {
			t.Errorf("%s: no entry index in %+v (err %v)", r.id, r.applied, r.err)
		}
	}
	if granted+exhausted != writers || granted == 0 {
		t.Errorf("granted %d, band exhausted %d, want %d acquires in all", granted, exhausted, writers)
	}
	batches, commands := leader.BatchStats()
	if batches == 0 || commands <= batches {
		t.Errorf("BatchStats() = %d batches of %d commands, want several commands per batch", batches, commands)
	}
	t.Logf("%d batches carried %d commands", batches, commands)
	mfs := gather(t, leader.Collector())
	for name, want := range map[string]uint64{"elanous_batches_total": batches, "elanous_batched_commands_total": commands} {
		if got := mfs[name].GetMetric()[0].GetCounter().GetValue(); got != float64(want) {
			t.Errorf("leader %s = %v, want %d", name, got, want)
		}
	}
	// Every replica applied the same batches.
	testutil.WaitFor(t, "equal state hashes", 10*time.Second, func() bool {
		i0, h0 := tc.nodes[0].FSM().AppliedHash()
		for _, n := range tc.nodes[1:] {
			if i, h := n.FSM().AppliedHash(); i != i0 || h != h0 {
				return false
			}
		}
		return true
	})
}

// A lone write does not wait for company: it goes out as a plain entry.
func TestNode_LoneWriteIsNotBatched(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	tc.waitFormat(li, fsm.MaxFormat)
	a, err := leader.Propose(context.Background(), acquire("o1", 60_000))
	if err != nil {
		t.Fatalf("Propose() error = %v", err)
	}
	if got := tc.commandsAfter(li, a.Index-1, fsm.AcquireLeaseType); len(got) != 1 || got[0].Index != a.Index {
		t.Errorf("entries of type acquire from index %d = %v, want the lone acquire as a plain entry at %d", a.Index, got, a.Index)
	}
	if b, _ := leader.BatchStats(); b != 0 {
		t.Errorf("BatchStats() = %d batches after one lone write, want 0", b)
	}
}

// The format level rises only to what every server's build knows; until it
// reaches 2 nothing is batched.
func TestNode_FormatFollowsTheOldestServer(t *testing.T) {
	// Every server starts out "old"; once a leader is known, all but one
	// follower are upgraded. (A leader always knows its own build's level, so
	// the old server must be a follower.)
	var mu sync.Mutex
	levels := map[string]int{"node-a": 1, "node-b": 1, "node-c": 1}
	probe := func(_ context.Context, c Candidate) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		l, ok := levels[c.Machine]
		if !ok {
			return 0, errors.New("unknown server")
		}
		return l, nil
	}
	tc := newTestCluster(t, 3, func(_ int, c *Config) { c.FormatProbe = probe })
	li, leader := tc.leader()
	old := tc.cfgs[(li+1)%3].ID
	mu.Lock()
	for id := range levels {
		if id != old {
			levels[id] = fsm.MaxFormat
		}
	}
	mu.Unlock()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fsm.RegisterResource{Caller: fsm.Caller{Owner: "o1"}, ID: fmt.Sprintf("machine:m%d", w), Kind: "machine", Name: "m", Machine: "m", TTLMs: 60_000}
			if _, err := leader.Propose(context.Background(), cmd); err != nil {
				t.Errorf("Propose() error = %v", err)
			}
		}()
	}
	wg.Wait()
	if got := leader.FSM().Format(); got != 1 {
		t.Fatalf("Format() = %d while %s knows only 1, want 1", got, old)
	}
	if b, _ := leader.BatchStats(); b != 0 {
		t.Errorf("BatchStats() = %d batches at format 1, want 0", b)
	}
	// The last one is upgraded: the leader raises the level at its next check.
	mu.Lock()
	levels[old] = fsm.MaxFormat
	mu.Unlock()
	tc.waitFormat(li, fsm.MaxFormat)
	for i := range tc.nodes {
		tc.waitFormat(i, fsm.MaxFormat)
	}
}

// A command that cannot be part of a batch (a limits change) proposed among
// concurrent writes goes out alone: it is applied, and the writes queued
// with it are not refused for its sake.
func TestNode_UnbatchableAmongBatches(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
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
