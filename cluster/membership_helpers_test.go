package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// errProbeDown is what the test probe answers for a server marked down.
var errProbeDown = errors.New("probe: server marked down")

// probes is the health probe of the membership tests: it asks the
// in-memory node of that name directly, as the API's probe asks its
// /v1/health, and counts the questions. A server marked down does not answer.
type probes struct {
	mu    sync.Mutex
	nodes map[string]*Node // guarded by mu
	down  map[string]bool  // guarded by mu
	calls map[string]int   // guarded by mu
}

func newProbes() *probes {
	return &probes{nodes: map[string]*Node{}, down: map[string]bool{}, calls: map[string]int{}}
}

func (p *probes) probe(_ context.Context, c Candidate) (ServerHealth, error) {
	p.mu.Lock()
	p.calls[c.Machine]++
	down, n := p.down[c.Machine], p.nodes[c.Machine]
	p.mu.Unlock()
	switch {
	case down:
		return ServerHealth{}, errProbeDown
	case n == nil:
		return ServerHealth{}, fmt.Errorf("probe: no node %s", c.Machine)
	}
	term, index := n.LastLog()
	return ServerHealth{AppliedIndex: n.FSM().AppliedIndex(), LastContact: n.LastContact(),
		LastLogTerm: term, LastLogIndex: index, LastLogKnown: true}, nil
}

// register makes the probe answer for n.
func (p *probes) register(nodes ...*Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range nodes {
		p.nodes[n.ID()] = n
	}
}

func (p *probes) setDown(machine string, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down[machine] = down
}

func (p *probes) count(machine string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[machine]
}

// waitProbes waits until machine has been probed n more times than now: n
// maintenance passes of the leader have run since.
func (p *probes) waitProbes(t *testing.T, machine string, n int) {
	t.Helper()
	target := p.count(machine) + n
	testutil.WaitFor(t, fmt.Sprintf("%d more probes of %s", n, machine), 10*time.Second, func() bool { return p.count(machine) >= target })
}

// membershipTweak sets fast membership timings and the test probe on every node.
func membershipTweak(p *probes) func(int, *Config) {
	return func(_ int, c *Config) {
		c.HealthProbe = p.probe
		c.MembershipInterval = 20 * time.Millisecond
		c.ServerStabilization = 100 * time.Millisecond
	}
}

// newMembershipCluster starts n in-memory nodes with the test probe and
// steadyTimeouts (membership tests follow one leader across several steps);
// extra tweaks apply after them.
func newMembershipCluster(t *testing.T, n int, extra ...func(int, *Config)) (*testCluster, *probes) {
	t.Helper()
	p := newProbes()
	tc := newTestCluster(t, n, func(i int, c *Config) {
		membershipTweak(p)(i, c)
		steadyTimeouts(i, c)
		for _, tw := range extra {
			tw(i, c)
		}
	})
	p.register(tc.nodes...)
	return tc, p
}

// newSeededMembership is newMembershipCluster(t, 3) once it has a leader,
// whose index it returns, and every node's directory holds the three.
func newSeededMembership(t *testing.T) (*testCluster, *probes, int) {
	t.Helper()
	tc, p := newMembershipCluster(t, 3)
	li := tc.readyLeader()
	tc.waitDirectory("node-a", "node-b", "node-c")
	return tc, p, li
}

// newSeededOneDown is newSeededMembership with one follower's probe down: it
// returns the leader's index, the follower's that answers and the one's that
// does not.
func newSeededOneDown(t *testing.T) (tc *testCluster, li, up, down int) {
	t.Helper()
	tc, p, li := newSeededMembership(t)
	others := tc.others(li)
	up, down = others[0], others[1]
	p.setDown(tc.nodes[down].ID(), true)
	return tc, li, up, down
}

// waitForgets waits, up to timeout each, until every node of indexes
// neither lists machine in its directory nor resolves it.
func (tc *testCluster) waitForgets(machine string, timeout time.Duration, indexes ...int) {
	tc.t.Helper()
	for _, i := range indexes {
		n := tc.nodes[i]
		testutil.WaitFor(tc.t, n.ID()+" forgets "+machine, timeout, func() bool {
			_, listed := n.directoryEntry(machine)
			_, resolved := n.Candidate(machine)
			return !listed && !resolved
		})
	}
}

// addWaiting starts a node named id without Raft state and with bootstrap
// off, connected to every node; it returns its index and the spec to add it
// with. Its configured candidates are the cluster's and itself.
func (tc *testCluster) addWaiting(id string, p *probes) (int, PeerSpec) {
	tc.t.Helper()
	addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", 7100+len(tc.nodes))))
	for _, o := range tc.trans {
		tr.Connect(o.LocalAddr(), o)
		o.Connect(addr, tr)
	}
	spec := PeerSpec{Machine: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 2000+len(tc.nodes)), Raft: string(addr)}
	cands := append(slices.Clone(tc.cfgs[0].Candidates), Candidate{Machine: spec.Machine, URL: spec.URL, Raft: spec.Raft})
	store := raft.NewInmemStore()
	s := &Stores{Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()}
	cfg := fastConfig(id, cands)
	cfg.Bootstrap = false
	// The cluster's raft timing, whatever the test chose.
	base := tc.cfgs[0]
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = base.HeartbeatTimeout, base.ElectionTimeout, base.LeaderLeaseTimeout
	cfg.Stores, cfg.Transport = s, tr
	membershipTweak(p)(len(tc.nodes), &cfg)
	node, err := New(cfg)
	if err != nil {
		tc.t.Fatalf("New(%s) error = %v", id, err)
	}
	// newTestCluster's cleanup closes every node of tc.nodes, this one too.
	p.register(node)
	tc.nodes, tc.cfgs, tc.stores, tc.trans = append(tc.nodes, node), append(tc.cfgs, cfg), append(tc.stores, s), append(tc.trans, tr)
	return len(tc.nodes) - 1, spec
}

// suffrage returns machine's suffrage in node i's latest Raft configuration,
// "" when it is not a server there.
func (tc *testCluster) suffrage(i int, machine string) string {
	s, ok := findServer(tc.nodes[i].raftServers(), machine)
	if !ok {
		return ""
	}
	return suffrageName(s.Suffrage)
}

// directory returns node i's candidate directory as machine → entry.
func (tc *testCluster) directory(i int) map[string]Candidate {
	out := map[string]Candidate{}
	for _, c := range tc.nodes[i].FSM().Candidates() {
		out[c.Machine] = Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft}
	}
	return out
}

// waitDirectory waits until every running node's directory lists exactly machines.
func (tc *testCluster) waitDirectory(machines ...string) {
	tc.t.Helper()
	slices.Sort(machines)
	for i, n := range tc.nodes {
		if n == nil {
			continue
		}
		testutil.WaitFor(tc.t, fmt.Sprintf("%s's directory lists %v", n.ID(), machines), 10*time.Second, func() bool {
			var got []string
			for m := range tc.directory(i) {
				got = append(got, m)
			}
			slices.Sort(got)
			return slices.Equal(got, machines)
		})
	}
}

// others returns the indexes of the running nodes other than i.
func (tc *testCluster) others(i int) []int {
	var out []int
	for j, n := range tc.nodes {
		if j != i && n != nil {
			out = append(out, j)
		}
	}
	return out
}

// addPeer adds spec through whichever node leads, again after a leadership
// change (a two-voter cluster under load may lose its leader for a moment;
// adding is idempotent).
func (tc *testCluster) addPeer(spec PeerSpec) PeerChange {
	tc.t.Helper()
	var change PeerChange
	testutil.Poll(tc.t, "add "+spec.Machine, 20*time.Second, func() error {
		var err error
		change, err = tc.nodes[tc.readyLeader()].AddPeer(context.Background(), spec)
		if err != nil && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNotReady) {
			tc.t.Fatalf("AddPeer(%s) error = %v", spec.Machine, err)
		}
		return err
	})
	return change
}

// steadyTimeouts gives a test that follows one leader across several steps
// timeouts a loaded machine (-race, 2 cores) does not trip over.
func steadyTimeouts(_ int, c *Config) {
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
}
