package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/transport"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

func TestElectionOrder(t *testing.T) {
	fig := func(m string, term, index uint64) logFigure { return logFigure{machine: m, term: term, index: index} }
	tests := []struct {
		name    string
		figures []logFigure
		quorum  int
		want    []string
	}{
		{"equal logs: by machine, the last name wins", []logFigure{fig("node-c", 3, 10), fig("node-b", 3, 10)}, 2,
			[]string{"node-b", "node-c"}},
		{"the longer log goes last", []logFigure{fig("node-b", 3, 11), fig("node-c", 3, 10)}, 2,
			[]string{"node-c", "node-b"}},
		{"a later term beats a longer log", []logFigure{fig("node-a", 4, 5), fig("node-c", 3, 100)}, 2,
			[]string{"node-c", "node-a"}},
		// Five voters, one dead: the two lowest stand, then the best; the
		// second best (node-c) is not needed and keeps raft's timers.
		{"five voters", []logFigure{fig("node-a", 3, 10), fig("node-b", 3, 12), fig("node-c", 3, 11), fig("node-e", 3, 9)}, 3,
			[]string{"node-e", "node-a", "node-b"}},
		{"four voters: all three survivors", []logFigure{fig("node-b", 2, 7), fig("node-c", 2, 7), fig("node-d", 2, 6)}, 3,
			[]string{"node-d", "node-b", "node-c"}},
		{"fewer survivors known than a quorum", []logFigure{fig("node-b", 3, 10)}, 2, nil},
		{"no quorum", []logFigure{fig("node-b", 3, 10)}, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.figures)
			if got := electionOrder(tc.figures, tc.quorum); !slices.Equal(got, tc.want) {
				t.Errorf("electionOrder(%v, %d) = %v, want %v", tc.figures, tc.quorum, got, tc.want)
			}
			slices.Reverse(in) // every survivor must compute the same order, whatever order it heard the others in
			if got := electionOrder(in, tc.quorum); !slices.Equal(got, tc.want) {
				t.Errorf("electionOrder(%v, %d) = %v, want %v", in, tc.quorum, got, tc.want)
			}
		})
	}
}

// Several connections drop at one death: one probe answers them all, timed
// from the first drop, and a kick left behind by a drop that probe already
// answered starts none.
func TestFailover_DropsCoalesce(t *testing.T) {
	f := failover{kick: make(chan struct{}, 1)}
	t0 := time.Now()
	f.dropped(t0)
	f.dropped(t0.Add(time.Millisecond))
	<-f.kick
	if got, ok := f.take(); !ok || !got.Equal(t0) {
		t.Fatalf("take() = %v, %v; want the first drop %v", got, ok, t0)
	}
	if _, ok := f.take(); ok {
		t.Fatal("a second take() found a drop; want none")
	}

	t1 := t0.Add(time.Second)
	f.dropped(t1)
	if got, ok := f.take(); !ok || !got.Equal(t1) { // taken before its kick was received
		t.Fatalf("take() = %v, %v; want %v", got, ok, t1)
	}
	<-f.kick
	if got, ok := f.take(); ok {
		t.Fatalf("take() after a kick whose drop was already taken = %v, true; want false", got)
	}
}

func TestProcessGone(t *testing.T) {
	// A port nothing listens on, as a dead process leaves it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.DialTimeout("tcp", addr, leaderProbeTimeout)
	if refused == nil {
		t.Skipf("a dial to closed port %s succeeded (something took it)", addr)
	}
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a dial to a closed port", refused, true},
		{"refused, wrapped", fmt.Errorf("dial node-a: %w", opErr(syscall.ECONNREFUSED)), true},
		{"a timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{"host unreachable", opErr(syscall.EHOSTUNREACH), false},
		{"network unreachable", opErr(syscall.ENETUNREACH), false},
		{"a reset after connecting", opErr(syscall.ECONNRESET), false},
		{"a TLS handshake failure", errors.New("dial node-a (127.0.0.1:1): remote error: tls: bad certificate"), false},
	}
	for _, tc := range tests {
		if got := transport.ProcessGone(tc.err); got != tc.want {
			t.Errorf("%s: transport.ProcessGone(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestHurryHeartbeat(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		since, lease, configured time.Duration
		want                     time.Duration
		ok                       bool
	}{
		{since: 260 * ms, lease: 250 * ms, configured: 500 * ms, want: 260 * ms, ok: true},
		{since: 250 * ms, lease: 250 * ms, configured: 500 * ms, want: 250 * ms, ok: true},
		// Past the configured timeout raft would go by itself, but only
		// when its randomized timer fires: 1 ms less notifies it now.
		{since: 900 * ms, lease: 250 * ms, configured: 500 * ms, want: 499 * ms, ok: true},
		{since: 249 * ms, lease: 250 * ms, configured: 500 * ms, ok: false},
		// A heartbeat timeout equal to the lease cannot be shortened.
		{since: 900 * ms, lease: 250 * ms, configured: 250 * ms, ok: false},
	}
	for _, tc := range tests {
		got, ok := hurryHeartbeat(tc.since, tc.lease, tc.configured)
		if ok != tc.ok || got != tc.want {
			t.Errorf("hurryHeartbeat(%s, %s, %s) = %s, %v; want %s, %v", tc.since, tc.lease, tc.configured, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLeaderDeathOver(t *testing.T) {
	seen := time.Now()
	d := leaderDeath{leader: "node-a", term: 4, seen: seen}
	tests := []struct {
		name string
		v    raftView
		want bool
	}{
		{"still following the dead leader", raftView{state: raft.Follower, leader: "node-a", term: 4, lastContact: seen.Add(-20 * time.Millisecond)}, false},
		// An append the dead leader sent before dying, written just after
		// its connections dropped, is no sign of life.
		{"a contact while the logs settle", raftView{state: raft.Follower, leader: "node-a", term: 4, lastContact: seen.Add(settleDelay / 2)}, false},
		{"candidate: leader forgotten, election running", raftView{state: raft.Candidate, term: 4}, false},
		{"follower without a leader after a vote", raftView{state: raft.Follower, term: 5, lastContact: seen.Add(time.Second)}, false},
		{"leads", raftView{state: raft.Leader, leader: "node-b", term: 5}, true},
		{"follows a new leader", raftView{state: raft.Follower, leader: "node-c", term: 5}, true},
		{"the same leader back in a later term", raftView{state: raft.Follower, leader: "node-a", term: 6}, true},
		{"the same leader heard from after the logs settled", raftView{state: raft.Follower, leader: "node-a", term: 4, lastContact: seen.Add(2 * settleDelay)}, true},
		{"shut down", raftView{state: raft.Shutdown}, true},
	}
	for _, tc := range tests {
		if got := d.over(tc.v); got != tc.want {
			t.Errorf("%s: over(%+v) = %v, want %v", tc.name, tc.v, got, tc.want)
		}
	}
}

// newTCPCluster starts three nodes on real TCP transports on loopback, with
// the default timeouts (500/500/250 ms: fast failover is measured against
// them), fast failover on and the in-process health probe.
func newTCPCluster(t *testing.T) (*testCluster, []*testutil.SyncBuffer) {
	t.Helper()
	addrs := testutil.FreeAddrs(t, 3)
	var cands []Candidate
	for i, a := range addrs {
		cands = append(cands, Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i), URL: "http://" + a, Raft: a})
	}
	p := newProbes()
	tc := &testCluster{t: t}
	var logs []*testutil.SyncBuffer
	for _, c := range cands {
		mem := raft.NewInmemStore()
		buf := &testutil.SyncBuffer{}
		cfg := Config{
			ID: c.Machine, Candidates: cands, Bootstrap: true, BindAddr: c.Raft, Advertise: c.Raft,
			Stores:        &Stores{Logs: mem, Stable: mem, Snapshots: raft.NewInmemSnapshotStore()},
			CommitTimeout: 5 * time.Millisecond, SweepInterval: time.Hour,
			FastFailover: true, HealthProbe: p.probe,
			Logger: slog.New(slog.NewTextHandler(buf, nil)),
		}
		node, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%s) error = %v", c.Machine, err)
		}
		tc.nodes, tc.cfgs, logs = append(tc.nodes, node), append(tc.cfgs, node.cfg), append(logs, buf)
	}
	p.register(tc.nodes...)
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.Close(ctx)
			cancel()
		}
	})
	return tc, logs
}

// kill closes node i's transport as its process's death would: its
// listener, so its address refuses connections, and every connection it
// had, so its peers read EOF at once. Its raft keeps running, cut off.
func (tc *testCluster) kill(i int) {
	tc.t.Helper()
	if err := tc.nodes[i].trans.(raft.WithClose).Close(); err != nil {
		tc.t.Fatalf("close node %d's transport: %v", i, err)
	}
}

// survivorsOf returns the indexes of the nodes but i.
func survivorsOf(tc *testCluster, i int) []int {
	var out []int
	for j := range tc.nodes {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// waitHurriedAndRestored waits until a survivor has hurried the election
// and every survivor that hurried one has restored the configured heartbeat
// timeout. A survivor whose turn comes after a leader is known again does not
// hurry (ranks are staggered: on a loaded machine the first may win before
// the second's turn).
func waitHurriedAndRestored(t *testing.T, tc *testCluster, survivors []int) {
	t.Helper()
	testutil.Poll(t, "a survivor hurried the election, and every one that did restored its heartbeat timeout", 10*time.Second, func() error {
		var total uint64
		for _, i := range survivors {
			n := tc.nodes[i]
			hurried, restored := n.failover.hurried.Load(), n.failover.restored.Load()
			if restored != hurried || n.raft.ReloadableConfig().HeartbeatTimeout != n.cfg.HeartbeatTimeout {
				return fmt.Errorf("%s hurried %d, restored %d, heartbeat timeout %s", n.ID(), hurried, restored, n.raft.ReloadableConfig().HeartbeatTimeout)
			}
			total += hurried
		}
		if total == 0 {
			return errors.New("no survivor hurried")
		}
		return nil
	})
}

// A leader whose process dies (its listener and connections closed) is
// replaced: a survivor sees a connection drop, finds the leader's address
// refusing, stands in its turn with a shortened heartbeat timeout, and
// restores the configured one once the new leader is known.
func TestFastFailover_DeadLeaderProcess(t *testing.T) {
	tc, logs := newTCPCluster(t)
	leader := tc.readyLeader()
	for i := range 5 {
		mustPropose(t, tc.nodes[leader], fsm.IssueToken{Machine: fmt.Sprintf("m%d", i), SHA256: fmt.Sprintf("%064x", i+1)})
	}
	for _, n := range tc.nodes {
		if got := n.raft.ReloadableConfig().HeartbeatTimeout; got != n.cfg.HeartbeatTimeout {
			t.Fatalf("%s runs with heartbeat timeout %s before any failure, want the configured %s", n.ID(), got, n.cfg.HeartbeatTimeout)
		}
	}

	tc.kill(leader)
	survivors := survivorsOf(tc, leader)
	t.Cleanup(func() {
		if t.Failed() {
			for _, i := range survivors {
				t.Logf("%s:\n%s", tc.nodes[i].ID(), logs[i])
			}
		}
	})
	next := tc.readyLeader(leader)
	waitHurriedAndRestored(t, tc, survivors)
	t.Logf("%s died, %s leads", tc.nodes[leader].ID(), tc.nodes[next].ID())
	// The new leader serves.
	mustPropose(t, tc.nodes[next], fsm.IssueToken{Machine: "after", SHA256: fmt.Sprintf("%064x", 99)})
}

// The same over mutual TLS: the TLS transport reports its admitted
// connections' drops, and the probe of a live leader is a full handshake.
func TestFastFailover_DeadLeaderProcessTLS(t *testing.T) {
	p := newProbes()
	tc := newTLSCluster(t, 500*time.Millisecond, func(c *Config) {
		c.FastFailover, c.HealthProbe, c.SweepInterval = true, p.probe, time.Hour
	})
	p.register(tc.nodes...)
	leader := tc.readyLeader()
	mustPropose(t, tc.nodes[leader], fsm.IssueToken{Machine: "before", SHA256: fmt.Sprintf("%064x", 1)})

	tc.kill(leader)
	next := tc.readyLeader(leader)
	waitHurriedAndRestored(t, tc.testCluster, survivorsOf(tc.testCluster, leader))
	mustPropose(t, tc.nodes[next], fsm.IssueToken{Machine: "after", SHA256: fmt.Sprintf("%064x", 2)})
}

// A leader that is only unreachable — its address accepts connections and
// answers nothing, as a paused process or a black hole would — is left to
// raft's timers even when its connections drop: no survivor shortens its
// heartbeat timeout.
func TestFastFailover_UnreachableLeaderIsNotHurried(t *testing.T) {
	tc, _ := newTCPCluster(t)
	leader, dead := tc.leader()

	// The leader's address keeps accepting: a listener takes it over
	// before the connections close, and holds what it accepts.
	if err := dead.stream.CloseListener(); err != nil {
		t.Fatal(err)
	}
	hang, err := net.Listen("tcp", tc.cfgs[leader].BindAddr)
	if err != nil {
		t.Fatalf("take over the leader's address: %v", err)
	}
	// A connection closed before it sent a byte is a probe; raft's own
	// dials (the candidates' vote requests) send their RPC and wait.
	var mu sync.Mutex
	var held []net.Conn
	var probes atomic.Int32
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			go func() {
				if n, err := c.Read(make([]byte, 1)); n == 0 && errors.Is(err, io.EOF) {
					probes.Add(1)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		hang.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	tc.kill(leader)

	tc.readyLeader(leader) // by raft's own timers
	if probes.Load() == 0 {
		t.Fatal("no survivor probed the leader's address after its connections dropped")
	}
	for _, i := range survivorsOf(tc, leader) {
		n := tc.nodes[i]
		if h := n.failover.hurried.Load(); h != 0 {
			t.Errorf("%s hurried %d elections for a leader whose address accepts connections, want 0", n.ID(), h)
		}
		if got := n.raft.ReloadableConfig().HeartbeatTimeout; got != n.cfg.HeartbeatTimeout {
			t.Errorf("%s runs with heartbeat timeout %s, want the configured %s", n.ID(), got, n.cfg.HeartbeatTimeout)
		}
	}
}
