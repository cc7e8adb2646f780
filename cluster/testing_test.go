package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// testCluster is an in-memory cluster of real raft nodes joined by InmemTransport.
type testCluster struct {
	t      *testing.T
	nodes  []*Node
	trans  []*raft.InmemTransport
	cfgs   []Config
	stores []*Stores
}

// fastConfig is a node of an in-memory test cluster: quick elections, and a
// leader lease long enough (100 ms) that a two-core machine running -race and
// other packages' tests does not depose a healthy leader mid-test.
func fastConfig(id string, cands []Candidate) Config {
	return Config{
		ID: id, Candidates: cands, Bootstrap: true,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, FormatCheckInterval: 100 * time.Millisecond,
		BatchApply: true, ParallelWrite: true, LogCache: 64,
	}
}

func newTestCluster(t *testing.T, n int, tweak func(i int, c *Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	var cands []Candidate
	for i := 0; i < n; i++ {
		// A host:port address, as the candidate directory wants.
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", 7000+i)))
		tc.trans = append(tc.trans, tr)
		cands = append(cands, Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i), URL: fmt.Sprintf("http://127.0.0.1:%d", 1000+i), Raft: string(addr)})
	}
	for i := range tc.trans {
		for j := range tc.trans {
			if i != j {
				tc.trans[i].Connect(tc.trans[j].LocalAddr(), tc.trans[j])
			}
		}
	}
	for i := 0; i < n; i++ {
		store := raft.NewInmemStore()
		s := &Stores{Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()}
		cfg := fastConfig(cands[i].Machine, cands)
		cfg.Stores, cfg.Transport = s, tc.trans[i]
		if tweak != nil {
			tweak(i, &cfg)
		}
		node, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%s) error = %v", cfg.ID, err)
		}
		tc.nodes, tc.cfgs, tc.stores = append(tc.nodes, node), append(tc.cfgs, cfg), append(tc.stores, s)
	}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			if n != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = n.Close(ctx)
				cancel()
			}
		}
	})
	return tc
}

// register is a machine registration by owner o1 with ttl ms.
func register(name string, ttl int64) fsm.RegisterResource {
	return fsm.RegisterResource{Caller: fsm.Caller{Owner: "o1"}, ID: "machine:" + name, Kind: "machine", Name: name, Machine: name, TTLMs: ttl}
}

// acquire is a port lease for owner on machine m1 with ttl ms.
func acquire(owner string, ttl int64) fsm.AcquireLease {
	return fsm.AcquireLease{Caller: fsm.Caller{Owner: owner}, LeaseID: "lease-" + owner, Machine: "m1",
		Purpose: "test", TTLMs: ttl, BandStart: 31450, BandEnd: 31499}
}

// mustPropose proposes cmd on n and fails the test on an error.
func mustPropose(t *testing.T, n *Node, cmd fsm.Command) Applied {
	t.Helper()
	res, err := n.Propose(context.Background(), cmd)
	if err != nil {
		t.Fatalf("Propose(%T) error = %v", cmd, err)
	}
	return res
}

// proposeOnLeader proposes cmd to whichever node leads, again on the next
// leader when leadership moved before the entry was taken (ErrNotLeader,
// ErrNoLeader, ErrNotReady: surely not applied), for up to 10 s.
func (tc *testCluster) proposeOnLeader(cmd fsm.Command) Applied {
	tc.t.Helper()
	var res Applied
	var err error
	testutil.WaitFor(tc.t, "a leader that takes the command", 10*time.Second, func() bool {
		res, err = tc.nodes[tc.readyLeader()].Propose(context.Background(), cmd)
		return !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotReady)
	})
	if err != nil {
		tc.t.Fatalf("Propose(%T) error = %v", cmd, err)
	}
	return res
}

// readyLeader waits for a leader whose claim is applied and returns its
// index; the nodes at except do not count.
func (tc *testCluster) readyLeader(except ...int) int {
	tc.t.Helper()
	var idx int
	testutil.WaitFor(tc.t, "a ready leader", 10*time.Second, func() bool {
		for i, n := range tc.nodes {
			if n == nil || contains(except, i) {
				continue
			}
			if _, err := n.readyLeadership(); err == nil {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// leader is readyLeader with the node.
func (tc *testCluster) leader() (int, *Node) {
	tc.t.Helper()
	li := tc.readyLeader()
	return li, tc.nodes[li]
}

// isolate cuts node i off from every other node, both ways.
func (tc *testCluster) isolate(i int) {
	for j := range tc.trans {
		if j != i {
			tc.trans[i].Disconnect(tc.trans[j].LocalAddr())
			tc.trans[j].Disconnect(tc.trans[i].LocalAddr())
		}
	}
}

// heal reconnects every pair of nodes, undoing isolate.
func (tc *testCluster) heal() {
	for i := range tc.trans {
		for j := range tc.trans {
			if i != j {
				tc.trans[i].Connect(tc.trans[j].LocalAddr(), tc.trans[j])
			}
		}
	}
}

// slowTimeouts returns a tweak for newTestCluster that sets every node's
// heartbeat and election timeout to d and its leader lease to lease (at most
// d), and turns the periodic sweep off (SweepInterval one hour): only a due
// record makes the leader sweep.
func slowTimeouts(d, lease time.Duration) func(int, *Config) {
	return func(_ int, c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = d, d, lease
		c.SweepInterval = time.Hour
	}
}

// commandsAfter returns the entries of node i's raft log after index that
// carry a command of type typ (the node's whole log, committed or not).
func (tc *testCluster) commandsAfter(i int, index uint64, typ fsm.CommandType) []raft.Log {
	tc.t.Helper()
	store := tc.stores[i].Logs
	last, err := store.LastIndex()
	if err != nil {
		tc.t.Fatalf("LastIndex() error = %v", err)
	}
	var out []raft.Log
	for idx := index + 1; idx <= last; idx++ {
		var entry raft.Log
		if err := store.GetLog(idx, &entry); err != nil {
			continue // compacted or truncated meanwhile
		}
		if entry.Type != raft.LogCommand {
			continue
		}
		if cmd, known, err := fsm.Decode(entry.Data); err == nil && known && cmd.Type() == typ {
			out = append(out, entry)
		}
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
