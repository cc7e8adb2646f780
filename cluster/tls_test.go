package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// tlsCluster is three real nodes over mutual TLS on loopback.
type tlsCluster struct {
	*testCluster
	pki   *testutil.PKI
	logs  []*testutil.SyncBuffer
	cands []Candidate
}

// newTLSCluster starts a tlsCluster with heartbeat and election timeout
// timeout (the lease half of it); each tweak applies to every node's Config
// before New.
func newTLSCluster(t *testing.T, timeout time.Duration, tweaks ...func(*Config)) *tlsCluster {
	t.Helper()
	pki := testutil.NewPKI(t)
	addrs := testutil.FreeAddrs(t, 3)
	var cands []Candidate
	for i, a := range addrs {
		cands = append(cands, Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i), URL: "https://" + a, Raft: a})
	}
	tc := &tlsCluster{testCluster: &testCluster{t: t}, pki: pki, cands: cands}
	for i, c := range cands {
		store, err := certs.Load(pki.Issue(c.Machine), c.Machine)
		if err != nil {
			t.Fatal(err)
		}
		mem := raft.NewInmemStore()
		logs := &testutil.SyncBuffer{}
		cfg := fastConfig(c.Machine, cands)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = timeout, timeout, timeout/2
		cfg.Stores = &Stores{Logs: mem, Stable: mem, Snapshots: raft.NewInmemSnapshotStore()}
		cfg.BindAddr, cfg.Advertise, cfg.TLS = c.Raft, c.Raft, store
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		for _, tw := range tweaks {
			tw(&cfg)
		}
		node, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%s) error = %v", c.Machine, err)
		}
		tc.nodes, tc.cfgs, tc.logs = append(tc.nodes, node), append(tc.cfgs, cfg), append(tc.logs, logs)
		_ = i
	}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.Close(ctx)
			cancel()
		}
	})
	return tc
}

// snapshot is what an attack must not change on a node.
type snapshot struct {
	term, last, applied uint64
	hash                string
}

func (tc *tlsCluster) snapshots() []snapshot {
	var out []snapshot
	for _, n := range tc.nodes {
		applied, hash := n.FSM().AppliedHash()
		out = append(out, snapshot{term: n.Raft().CurrentTerm(), last: n.Raft().LastIndex(), applied: applied, hash: hash})
	}
	return out
}

// converged waits until every node applied the same index.
func (tc *tlsCluster) converged() {
	tc.t.Helper()
	testutil.WaitFor(tc.t, "every node applied the same index", 10*time.Second, func() bool {
		s := tc.snapshots()
		for _, x := range s[1:] {
			if x.applied != s[0].applied || x.hash != s[0].hash || x.term != s[0].term {
				return false
			}
		}
		return s[0].applied > 0
	})
}

// quiesced waits until the cluster writes nothing more of its own: every node
// holds the same log and has applied all of it, and so it stays for a few
// polls. A new leader follows its claim with entries of its own (the
// candidate directory, the format level), so a picture taken just after
// converged may still have one in flight. Quiet is the same picture for
// 150 ms of polls.
func (tc *tlsCluster) quiesced() {
	tc.t.Helper()
	const quiet = 150 * time.Millisecond // unchanged this long counts as quiet
	var prev []snapshot
	var since time.Time
	testutil.WaitFor(tc.t, "the cluster quiet, every node at the same applied log", 15*time.Second, func() bool {
		s := tc.snapshots()
		for i, x := range s {
			n := tc.nodes[i]
			if x != s[0] || n.Raft().AppliedIndex() != n.Raft().LastIndex() {
				prev = nil
				return false
			}
		}
		if prev == nil || !slices.Equal(prev, s) {
			prev, since = s, time.Now()
			return false
		}
		return time.Since(since) >= quiet
	})
}

func TestTLSTransport_ClusterReplicates(t *testing.T) {
	tc := newTLSCluster(t, 200*time.Millisecond)
	leader := tc.readyLeader()
	cmd := fsm.IssueToken{Machine: "mbp", SHA256: strings.Repeat("ab", 32)}
	mustPropose(t, tc.nodes[leader], cmd)
	testutil.WaitFor(t, "the token on every node", 10*time.Second, func() bool {
		for _, n := range tc.nodes {
			if len(n.FSM().Tokens()) != 1 {
				return false
			}
		}
		return true
	})
	for i, l := range tc.logs {
		if strings.Contains(l.String(), "raft connection refused") || strings.Contains(l.String(), "raft dial refused") {
			t.Errorf("node %d refused a connection of its own cluster:\n%s", i, l)
		}
	}
}

// attackStream is the stream layer of an attacker's raw raft transport: it
// dials with cfg (plain TCP when nil) and accepts nothing.
type attackStream struct {
	cfg    *tls.Config
	local  net.Addr
	mu     sync.Mutex
	locals []string // local addresses of the connections it made
	done   chan struct{}
	once   sync.Once
}

func (s *attackStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	raw, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.locals = append(s.locals, raw.LocalAddr().String())
	s.mu.Unlock()
	if s.cfg == nil {
		return raw, nil
	}
	c := tls.Client(raw, s.cfg)
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

func (s *attackStream) Accept() (net.Conn, error) { <-s.done; return nil, net.ErrClosed }
func (s *attackStream) Close() error              { s.once.Do(func() { close(s.done) }); return nil }
func (s *attackStream) Addr() net.Addr            { return s.local }

// The raw Raft attacks of the security model: an attacker's hashicorp/raft
// transport sends AppendEntries with a higher term, claiming to be node-a
// and carrying a command that issues it a machine token. Each time the
// handshake or the name check must fail, the cluster's term, log and state
// hash stay as they were, and the attacked node logs the refusal with the
// attacker's address.
func TestTLSTransport_RawAttacksRefused(t *testing.T) {
	tc := newTLSCluster(t, time.Second)
	tc.readyLeader()
	tc.converged()
	otherCA := testutil.NewPKI(t)

	nodeA := tc.cands[0]
	cases := []struct {
		name   string
		cfg    *tls.Config
		target int    // the node attacked
		reason string // in its log line
	}{
		{"plain TCP", nil, 1, "tls handshake"},
		{"TLS without a certificate", tc.pki.ClientTLS(""), 1, "certificate"},
		{"certificate of another CA naming node-a", otherCA.ClientTLS("node-a"), 1, "unknown authority"},
		{"certificate of the CA naming a non-candidate", tc.pki.ClientTLS("node-x"), 1, "names no candidate"},
		{"node-b's certificate dialling node-c as node-a", tc.pki.ClientTLS("node-b"), 2, "certificate names node-b but the AppendEntries claims to come from"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc.quiesced()
			before := tc.snapshots()
			stream := &attackStream{cfg: c.cfg, local: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, done: make(chan struct{})}
			attacker := raft.NewNetworkTransport(stream, 1, 2*time.Second, nil)
			defer attacker.Close()

			sum := strings.Repeat("e", 64)
			data, err := fsm.Encode(fsm.IssueToken{Header: fsm.Header{Now: time.Now().UnixMilli()}, Machine: "evil", SHA256: sum})
			if err != nil {
				t.Fatal(err)
			}
			term := before[c.target].term + 10
			req := raft.AppendEntriesRequest{
				RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(nodeA.Machine), Addr: []byte(nodeA.Raft)},
				Term:              term,
				PrevLogEntry:      before[c.target].last,
				PrevLogTerm:       before[c.target].term,
				Entries:           []*raft.Log{{Index: before[c.target].last + 1, Term: term, Type: raft.LogCommand, Data: data}},
				LeaderCommitIndex: before[c.target].last + 1,
			}
			var resp raft.AppendEntriesResponse
			target := tc.cands[c.target]
			err = attacker.AppendEntries(raft.ServerID(target.Machine), raft.ServerAddress(target.Raft), &req, &resp)
			if err == nil {
				t.Fatalf("AppendEntries() to %s = %+v, nil error; want a refusal", target.Machine, resp)
			}
			stream.mu.Lock()
			locals := append([]string(nil), stream.locals...)
			stream.mu.Unlock()
			if len(locals) == 0 {
				t.Fatalf("the attacker never connected: %v", err)
			}
			testutil.WaitFor(t, "the refusal in the attacked node's log", 5*time.Second, func() bool {
				for _, line := range strings.Split(tc.logs[c.target].String(), "\n") {
					if strings.Contains(line, "raft connection refused") && strings.Contains(line, "remote="+locals[0]) && strings.Contains(line, c.reason) {
						return true
					}
				}
				return false
			})
			// Accepted, the attack would have moved the node to the attacker's
			// term before anything else, and applied its token. The cluster's
			// own entries (an election on a loaded machine) may move the log.
			after := tc.snapshots()
			for i := range before {
				if after[i].term >= term {
					t.Errorf("node %s: term %d, want below the attacker's %d (was %d)", tc.cands[i].Machine, after[i].term, term, before[i].term)
				}
			}
			for i, n := range tc.nodes {
				for _, tok := range n.FSM().Tokens() {
					if tok.Machine == "evil" {
						t.Errorf("node %s holds the attacker's token", tc.cands[i].Machine)
					}
				}
			}
		})
	}
	t.Logf("refusals logged by node-b:\n%s", grepLines(tc.logs[1].String(), "refused"))
	t.Logf("refusals logged by node-c:\n%s", grepLines(tc.logs[2].String(), "refused"))
}

func grepLines(s, needle string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, needle) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
