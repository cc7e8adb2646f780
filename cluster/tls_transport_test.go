package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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

// testPKI is a CA and the files of the certificates it issued, in a temp dir.
type testPKI struct {
	t   *testing.T
	dir string
	ca  certs.Pair
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(p.caFile(), ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *testPKI) caFile() string { return filepath.Join(p.dir, "ca.pem") }

// issue writes a certificate for machine (SAN machine and 127.0.0.1) and
// returns the files of a store for it.
func (p *testPKI) issue(machine string) certs.Files {
	p.t.Helper()
	pair, err := certs.NewCert(p.ca, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	f := certs.Files{CA: p.caFile(), Cert: filepath.Join(p.dir, machine+".pem"), Key: filepath.Join(p.dir, machine+"-key.pem")}
	if err := os.WriteFile(f.Cert, pair.Cert, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pair.Key, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// tlsConfig returns a client TLS config presenting machine's certificate of
// this CA (or none when machine is ""), trusting nothing: the attacker does
// not care who answers.
func (p *testPKI) clientTLS(machine string) *tls.Config {
	p.t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if machine != "" {
		f := p.issue(machine)
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			p.t.Fatal(err)
		}
		// Present it whatever CAs the server says it accepts.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	return cfg
}

// freeAddrs returns n loopback addresses whose ports were free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}

// tlsCluster is three real nodes over mutual TLS on loopback.
type tlsCluster struct {
	*testCluster
	pki   *testPKI
	logs  []*testutil.SyncBuffer
	cands []Candidate
}

// newTLSCluster starts a tlsCluster with heartbeat and election timeout
// timeout (the lease half of it); each tweak applies to every node's Config
// before New.
func newTLSCluster(t *testing.T, timeout time.Duration, tweaks ...func(*Config)) *tlsCluster {
	t.Helper()
	pki := newTestPKI(t)
	addrs := freeAddrs(t, 3)
	var cands []Candidate
	for i, a := range addrs {
		cands = append(cands, Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i), URL: "https://" + a, Raft: a})
	}
	tc := &tlsCluster{testCluster: &testCluster{t: t}, pki: pki, cands: cands}
	for i, c := range cands {
		store, err := certs.Load(pki.issue(c.Machine), c.Machine)
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
	if _, err := tc.nodes[leader].Propose(context.Background(), cmd); err != nil {
		t.Fatalf("Propose() error = %v", err)
	}
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
	otherCA := newTestPKI(t)

	nodeA := tc.cands[0]
	cases := []struct {
		name   string
		cfg    *tls.Config
		target int    // the node attacked
		reason string // in its log line
	}{
		{"plain TCP", nil, 1, "tls handshake"},
		{"TLS without a certificate", tc.pki.clientTLS(""), 1, "certificate"},
		{"certificate of another CA naming node-a", otherCA.clientTLS("node-a"), 1, "unknown authority"},
		{"certificate of the CA naming a non-candidate", tc.pki.clientTLS("node-x"), 1, "names no candidate"},
		{"node-b's certificate dialling node-c as node-a", tc.pki.clientTLS("node-b"), 2, "certificate names node-b but the AppendEntries claims to come from"},
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
			after := tc.snapshots()
			for i := range before {
				if after[i] != before[i] {
					t.Errorf("node %s: term, last index, applied index and hash %+v, want %+v unchanged", tc.cands[i].Machine, after[i], before[i])
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

// A dial to node-b must reach a certificate naming node-b: a listener at
// node-b's address presenting node-c's certificate (of the same CA) is
// refused before an RPC is sent, and the dialler logs why.
func TestTLSDialer_RefusesWrongPeerCertificate(t *testing.T) {
	pki := newTestPKI(t)
	addrs := freeAddrs(t, 2)
	cands := []Candidate{{Machine: "node-a", Raft: addrs[0]}, {Machine: "node-b", Raft: addrs[1]}, {Machine: "node-c", Raft: "127.0.0.1:9"}}
	impostor, err := certs.Load(pki.issue("node-c"), "node-c")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", addrs[1], impostor.ServerConfig(tls.RequireAndVerifyClientCert))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()

	store, err := certs.Load(pki.issue("node-a"), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	tr, err := newTLSTransport(tlsTransportConfig{BindAddr: addrs[0], Advertise: addrs[0], Certs: store,
		Peers: func() []Candidate { return cands }, Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		HCLog: raftLogger(Config{ID: "node-a", Logger: slog.New(slog.DiscardHandler)})})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	var resp raft.RequestVoteResponse
	err = tr.RequestVote("node-b", raft.ServerAddress(addrs[1]), &raft.RequestVoteRequest{Term: 2}, &resp)
	if err == nil {
		t.Fatal("RequestVote() to an impostor error = nil, want a refused handshake")
	}
	if !strings.Contains(logs.String(), "raft dial refused") || !strings.Contains(logs.String(), "peer=node-b") {
		t.Errorf("log = %q, want a \"raft dial refused\" line naming node-b", logs.String())
	}
	err = tr.RequestVote("node-z", "127.0.0.1:7", &raft.RequestVoteRequest{Term: 2}, &resp)
	if !errors.Is(err, ErrUnknownPeerAddress) {
		t.Errorf("RequestVote() to an address no candidate has error = %v, want %v", err, ErrUnknownPeerAddress)
	}
}

// Heartbeats over the TLS transport reach raft's main loop through
// Consumer, never a fast-path handler (hashicorp/raft#695, see
// mainThreadHeartbeats).
func TestSafeTransport_TLSHeartbeatsOnMainThread(t *testing.T) {
	pki := newTestPKI(t)
	addrs := freeAddrs(t, 2)
	cands := []Candidate{{Machine: "node-a", Raft: addrs[0]}, {Machine: "node-b", Raft: addrs[1]}}
	open := func(i int) *tlsTransport {
		store, err := certs.Load(pki.issue(cands[i].Machine), cands[i].Machine)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := newTLSTransport(tlsTransportConfig{BindAddr: addrs[i], Advertise: addrs[i], Certs: store,
			Peers: func() []Candidate { return cands }, Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
			HCLog: raftLogger(Config{ID: cands[i].Machine, Logger: slog.New(slog.DiscardHandler)})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	recvRaw, send := open(0), open(1)
	recv := safeTransport(recvRaw)
	if _, ok := recv.(raft.WithPreVote); !ok {
		t.Fatalf("safeTransport() dropped pre-vote support")
	}
	var fastPath bool
	var mu sync.Mutex
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		fastPath = true
		mu.Unlock()
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})
	go func() {
		select {
		case rpc := <-recv.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		case <-time.After(5 * time.Second):
		}
	}()
	hb := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("node-b"), Addr: []byte(addrs[1])}, Term: 7}
	var resp raft.AppendEntriesResponse
	if err := send.AppendEntries("node-a", raft.ServerAddress(addrs[0]), &hb, &resp); err != nil {
		t.Fatalf("AppendEntries() error = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fastPath || !resp.Success {
		t.Fatalf("heartbeat took the fast path = %v, main-loop answer = %+v; want it on Consumer()", fastPath, resp)
	}
}
