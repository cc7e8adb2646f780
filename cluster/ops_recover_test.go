package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// closeNode closes n within a second.
func closeNode(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close(%s) error = %v", n.ID(), err)
	}
}

func TestRecover_LostQuorum(t *testing.T) {
	dir := t.TempDir()
	p := newProbes()
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		membershipTweak(p)(i, c)
		c.Stores, c.DataDir = nil, filepath.Join(dir, c.ID) // boltdb on disk
		c.SweepInterval = time.Hour                         // nothing but the test writes
	})
	p.register(tc.nodes...)
	li := tc.readyLeader()
	tc.waitDirectory("node-a", "node-b", "node-c")
	leader := tc.nodes[li]
	var leases []fsm.PortLease
	for _, owner := range []string{"o1", "o2", "o3"} {
		leases = append(leases, mustPropose(t, leader, acquire(owner, 3_600_000)).Value.(fsm.PortLease))
	}
	mustPropose(t, leader, fsm.IssueToken{Machine: "m1", SHA256: strings.Repeat("ab", 32)})
	// Every node applied the same state.
	target := leader.FSM().AppliedIndex()
	for _, n := range tc.nodes {
		testutil.WaitFor(t, n.ID()+" applied everything", 5*time.Second, func() bool { return n.FSM().AppliedIndex() >= target })
	}
	wantApplied, wantHash := leader.FSM().AppliedHash()

	// Two of three are lost; the survivor is stopped.
	si := tc.others(li)[0]
	survivor := tc.cfgs[si]
	for i, n := range tc.nodes {
		if i != si {
			// Lost, not stopped: no leadership hand-over to the survivor
			// (whose claim would then be in its log).
			if err := n.raft.Shutdown().Error(); err != nil {
				t.Fatalf("shutdown %s: %v", n.ID(), err)
			}
			closeNode(t, n)
		}
	}
	if _, err := Recover(RecoverConfig{ID: survivor.ID, DataDir: survivor.DataDir, Peers: []string{survivor.ID}}); !errors.Is(err, ErrNodeRunning) {
		t.Fatalf("Recover() on a running node error = %v, want ErrNodeRunning", err)
	}
	closeNode(t, tc.nodes[si])

	refusals := []struct {
		name string
		cfg  RecoverConfig
		want error
	}{
		{"no raft state", RecoverConfig{ID: "node-x", DataDir: t.TempDir(), Peers: []string{"node-x"}}, ErrNoRaftState},
	}
	for _, tt := range refusals {
		if _, err := Recover(tt.cfg); !errors.Is(err, tt.want) {
			t.Errorf("Recover(%s) error = %v, want %v", tt.name, err, tt.want)
		}
	}
	for _, peers := range [][]string{nil, {"node-x"}, {survivor.ID, "node-x"}} {
		if _, err := Recover(RecoverConfig{ID: survivor.ID, DataDir: survivor.DataDir, Peers: peers}); err == nil {
			t.Errorf("Recover(peers %v) error = nil, want a refusal", peers)
		}
	}

	res, err := Recover(RecoverConfig{ID: survivor.ID, DataDir: survivor.DataDir, Peers: []string{survivor.ID}})
	if err != nil {
		t.Fatalf("Recover() error = %v", err)
	}
	if res.AppliedIndex != wantApplied || res.StateHash != wantHash {
		t.Errorf("Recover() state = %d/%s, want %d/%s", res.AppliedIndex, res.StateHash, wantApplied, wantHash)
	}
	if len(res.Servers) != 1 || res.Servers[0].Machine != survivor.ID || res.Servers[0].Raft != string(tc.trans[si].LocalAddr()) {
		t.Errorf("Recover() servers = %+v, want %s alone at %s", res.Servers, survivor.ID, tc.trans[si].LocalAddr())
	}

	// The survivor starts alone and leads with its data.
	_, tr := raft.NewInmemTransport(tc.trans[si].LocalAddr())
	cfg := survivor
	cfg.Transport = tr
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New(recovered %s) error = %v", cfg.ID, err)
	}
	rc := &testCluster{t: t, nodes: []*Node{n}, cfgs: []Config{cfg}, trans: []*raft.InmemTransport{tr}}
	t.Cleanup(func() {
		for _, o := range rc.nodes {
			if o != nil {
				closeNode(t, o)
			}
		}
	})
	p = newProbes()
	p.register(n)
	n.SetHealthProbe(p.probe)
	rc.readyLeader()
	for _, want := range leases {
		got, ok := n.FSM().Lease(want.Port)
		if !ok || got.LeaseID != want.LeaseID || got.Fence != want.Fence {
			t.Errorf("recovered lease on port %d = %+v, %v; want id %s fence %d", want.Port, got, ok, want.LeaseID, want.Fence)
		}
	}
	if got := n.FSM().Tokens(); len(got) != 1 {
		t.Errorf("recovered tokens = %+v, want one", got)
	}
	rc.waitDirectory(survivor.ID) // the lost servers' entries are dropped

	// Two fresh servers join, catch up and vote.
	for _, id := range []string{"node-d", "node-e"} {
		_, spec := rc.addWaiting(id, p)
		rc.addPeer(spec)
		testutil.WaitFor(t, id+" promoted", 10*time.Second, func() bool { return rc.suffrage(0, id) == SuffrageVoter })
	}
	var voters []string
	for _, s := range n.raftServers() {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	slices.Sort(voters)
	want := []string{"node-d", "node-e", survivor.ID}
	slices.Sort(want)
	if !slices.Equal(voters, want) {
		t.Errorf("voters after the two adds = %v, want %v", voters, want)
	}
	// They vote: without the survivor, the two elect a leader that has the data.
	closeNode(t, n)
	rc.nodes[0] = nil // for readyLeader
	ni := rc.readyLeader()
	if got, ok := rc.nodes[ni].FSM().Lease(leases[0].Port); !ok || got.LeaseID != leases[0].LeaseID {
		t.Errorf("new leader %s lease on port %d = %+v, %v; want %s", rc.nodes[ni].ID(), leases[0].Port, got, ok, leases[0].LeaseID)
	}
}
