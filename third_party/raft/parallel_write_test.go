// Patched (elanous-node): the tests of Config.ParallelLeaderWrite.

package raft

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gatedStore is an in-memory log store whose StoreLogs can be held until
// released, or made to fail.
type gatedStore struct {
	*InmemStore
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
	fail    error
}

func (g *gatedStore) StoreLogs(logs []*Log) error {
	g.mu.Lock()
	gate, entered, fail := g.gate, g.entered, g.fail
	g.mu.Unlock()
	if gate != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}
	if fail != nil {
		return fail
	}
	return g.InmemStore.StoreLogs(logs)
}

func (g *gatedStore) StoreLog(l *Log) error { return g.StoreLogs([]*Log{l}) }

func (g *gatedStore) arm(fail error) (release func()) {
	gate := make(chan struct{})
	g.mu.Lock()
	g.gate, g.entered, g.fail = gate, make(chan struct{}, 1), fail
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.gate = nil
			g.mu.Unlock()
			close(gate)
		})
	}
}

func (g *gatedStore) has(index uint64) bool {
	var l Log
	return g.InmemStore.GetLog(index, &l) == nil
}

// parallelCluster starts three bootstrapped servers on gated stores and
// returns the leader's position once one leads.
func parallelCluster(t *testing.T, parallel bool) ([]*Raft, []*gatedStore, int) {
	t.Helper()
	var (
		rafts   []*Raft
		stores  []*gatedStore
		trans   []*InmemTransport
		servers []Server
	)
	for i := 0; i < 3; i++ {
		addr, tr := NewInmemTransport("")
		trans = append(trans, tr)
		servers = append(servers, Server{Suffrage: Voter, ID: ServerID(fmt.Sprintf("s%d", i)), Address: addr})
	}
	for _, a := range trans {
		for _, b := range trans {
			if a != b {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := 0; i < 3; i++ {
		conf := inmemConfig(t)
		conf.LocalID = servers[i].ID
		conf.ParallelLeaderWrite = parallel
		store := &gatedStore{InmemStore: NewInmemStore()}
		_, snaps := FileSnapTest(t)
		if err := BootstrapCluster(conf, store, store, snaps, trans[i], Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := NewRaft(conf, &MockFSM{}, store, store, snaps, trans[i])
		if err != nil {
			t.Fatal(err)
		}
		rafts = append(rafts, r)
		stores = append(stores, store)
	}
	t.Cleanup(func() {
		for _, s := range stores {
			s.mu.Lock()
			gate := s.gate
			s.gate = nil
			s.mu.Unlock()
			if gate != nil {
				close(gate)
			}
		}
		for _, r := range rafts {
			_ = r.Shutdown().Error()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, r := range rafts {
			if r.State() == Leader {
				if err := r.Barrier(5 * time.Second).Error(); err != nil {
					t.Fatal(err)
				}
				return rafts, stores, i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader within 10s")
	return nil, nil, 0
}

// With ParallelLeaderWrite, the followers receive and store an entry while
// the leader's own write of it is still held, and the entry is answered
// once that write is done.
func TestRaft_ParallelLeaderWriteReplicatesDuringTheLeadersWrite(t *testing.T) {
	rafts, stores, li := parallelCluster(t, true)
	leader, ls := rafts[li], stores[li]
	release := ls.arm(nil)
	defer release()
	future := leader.Apply([]byte("x"), 5*time.Second)
	<-ls.entered
	index := leader.getLastIndex()

	deadline := time.Now().Add(5 * time.Second)
	for {
		all := true
		for i, s := range stores {
			if i != li && !s.has(index) {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the followers did not store entry %d while the leader's write was held", index)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ls.has(index) {
		t.Fatalf("the leader stored entry %d before its write was released", index)
	}
	select {
	case <-future.(*logFuture).errCh:
		t.Fatal("Apply answered before the leader's own write was done")
	default:
	}

	release()
	if err := future.Error(); err != nil {
		t.Fatalf("Apply() = %v after the leader's write was released", err)
	}
	if !ls.has(index) {
		t.Fatalf("the leader does not hold entry %d after its write", index)
	}
}

// Without ParallelLeaderWrite, no follower receives an entry before the
// leader has written it (the upstream order).
func TestRaft_SequentialLeaderWriteWaitsForTheLeader(t *testing.T) {
	rafts, stores, li := parallelCluster(t, false)
	leader, ls := rafts[li], stores[li]
	before := leader.getLastIndex()
	release := ls.arm(nil)
	defer release()
	future := leader.Apply([]byte("x"), 5*time.Second)
	<-ls.entered
	// The replicators send up to the last index, which the leader sets
	// only after its write: nothing can reach a follower meanwhile.
	if last := leader.getLastIndex(); last != before {
		t.Fatalf("last index during the leader's write = %d, want %d (published before the write)", last, before)
	}
	index := before + 1
	for i, s := range stores {
		if i != li && s.has(index) {
			t.Fatalf("follower %d stored entry %d before the leader's write", i, index)
		}
	}
	release()
	if err := future.Error(); err != nil {
		t.Fatalf("Apply() = %v", err)
	}
}

// When the leader's own write fails after the followers may have the
// entries, Apply answers ErrLeadershipLost (the entry may still commit),
// the leader steps down, and its last log index goes back.
func TestRaft_ParallelLeaderWriteFailureIsOutcomeUnknown(t *testing.T) {
	rafts, stores, li := parallelCluster(t, true)
	leader, ls := rafts[li], stores[li]
	before := leader.getLastIndex()
	release := ls.arm(errors.New("disk failed"))
	future := leader.Apply([]byte("x"), 5*time.Second)
	<-ls.entered
	release()
	if err := future.Error(); !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("Apply() = %v, want ErrLeadershipLost", err)
	}
	// The last index went back before the answer; no other leader can have
	// appended to this log yet (that takes an election timeout).
	if last := leader.getLastIndex(); last != before {
		t.Fatalf("last index after the failed write = %d, want %d", last, before)
	}
	deadline := time.Now().Add(5 * time.Second)
	for leader.State() == Leader {
		if time.Now().After(deadline) {
			t.Fatal("the leader did not step down after its write failed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
