// Package apitest starts real elanous-node clusters inside a test process:
// every node is a cluster.Node with raft-boltdb stores in a temp dir, a TCP
// Raft transport and an api.Server on a loopback listener, all on ephemeral
// ports. Tests of the API, the member library and the CLI use it.
package apitest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// Node is one running candidate.
type Node struct {
	Machine string
	URL     string
	Node    *cluster.Node
	Server  *api.Server
	DataDir string
	ln      net.Listener
	stopped bool
	joined  bool // started by StartWaiting: bootstrap off
}

// Cluster is a running loopback cluster.
type Cluster struct {
	t      testing.TB
	Nodes  []*Node
	Tokens wire.TokensFile
	// PKI is the cluster's CA and certificates when Options.TLS is set.
	PKI   *PKI
	cands []cluster.Candidate
	trans []raft.Transport
	opts  Options
}

// DefaultRenewSlack is the nodes' renewal slack unless
// Options.EveryRenewalWrites: ttl.renew_slack's default.
const DefaultRenewSlack = defaults.RenewSlack

// Options tune a cluster. Zero values take fast test defaults.
type Options struct {
	Nodes   int           // default 3
	Timeout time.Duration // raft heartbeat and election timeout; default 100ms
	Sweep   time.Duration // sweep interval; default 200ms
	// CommitTimeout is raft's: how long a leader with nothing to send waits
	// before telling followers its commit index; default 5ms.
	CommitTimeout time.Duration
	// API, when set, may change the api.Deps of node i before its server
	// starts (and again at each restart): a counting random source, a
	// registry the test reads metrics from, its Limits. The write rate
	// limits are off unless it sets Limits.WriteRate: tests drive many
	// writes from one address; the other caps keep their defaults.
	API func(i int, d *api.Deps)
	// TLS runs Raft over mutual TLS and the API over HTTPS, with
	// certificates of a CA made for the cluster (Cluster.PKI).
	TLS bool
	// VerifyClients makes the HTTPS API require client certificates.
	VerifyClients bool
	// EventRing is each node's cluster.Config.EventRing (0: the default).
	EventRing int
	// EveryRenewalWrites turns the renewal slack off (ttl.renew_slack 0):
	// every heartbeat and lease renewal is a log entry. By default the
	// nodes renew with the default slack of a quarter TTL.
	EveryRenewalWrites bool
	// Transport, when set, wraps node i's raft transport (without TLS) at
	// each start: a test that holds back replication to one node.
	Transport func(i int, t raft.Transport) raft.Transport
}

// Start starts a cluster and waits until every node is ready and has
// applied the entries a new cluster's leader appends by itself (the format
// level, the candidate directory), so a test's own writes are the only ones
// after it returns. It is stopped by t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Timeout == 0 {
		opts.Timeout = 100 * time.Millisecond
	}
	if opts.Sweep == 0 {
		opts.Sweep = 200 * time.Millisecond
	}
	if opts.CommitTimeout == 0 {
		opts.CommitTimeout = 5 * time.Millisecond
	}
	c := &Cluster{t: t, opts: opts, Tokens: wire.TokensFile{Admin: testutil.RandomToken(), Member: testutil.RandomToken(), Query: testutil.RandomToken()}}
	scheme := "http://"
	if opts.TLS {
		c.PKI = NewPKI(t)
		scheme = "https://"
	}
	var lns []net.Listener
	for i := 0; i < opts.Nodes; i++ {
		var trans raft.Transport
		var raftAddr string
		if opts.TLS {
			// cluster.New opens the TLS transport on a port free a moment ago.
			raftAddr = testutil.FreeAddrs(t, 1)[0]
		} else {
			tcp, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 2*time.Second, nil)
			if err != nil {
				t.Fatalf("raft transport: %v", err)
			}
			trans, raftAddr = tcp, string(tcp.LocalAddr())
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		lns = append(lns, ln)
		c.trans = append(c.trans, trans)
		c.cands = append(c.cands, cluster.Candidate{
			Machine: fmt.Sprintf("node-%c", 'a'+i),
			URL:     scheme + ln.Addr().String(),
			Raft:    raftAddr,
		})
	}
	dir := t.TempDir()
	for i := range c.cands {
		c.Nodes = append(c.Nodes, &Node{Machine: c.cands[i].Machine, URL: c.cands[i].URL, DataDir: filepath.Join(dir, c.cands[i].Machine)})
		c.startNode(i, c.trans[i], lns[i])
	}
	t.Cleanup(c.Stop)
	c.WaitReady()
	c.waitSettled()
	return c
}

func (c *Cluster) nodeConfig(i int, trans raft.Transport) cluster.Config {
	cfg := cluster.Config{
		ID: c.cands[i].Machine, Candidates: c.cands, Bootstrap: !c.Nodes[i].joined,
		DataDir: c.Nodes[i].DataDir, Transport: trans,
		HeartbeatTimeout: c.opts.Timeout, ElectionTimeout: c.opts.Timeout,
		LeaderLeaseTimeout: c.opts.Timeout / 2, CommitTimeout: c.opts.CommitTimeout,
		SweepInterval: c.opts.Sweep, FormatCheckInterval: 200 * time.Millisecond,
		MembershipInterval: 100 * time.Millisecond, ServerStabilization: 300 * time.Millisecond,
		EventRing: c.opts.EventRing, RenewSlack: DefaultRenewSlack,
	}
	if c.opts.EveryRenewalWrites {
		cfg.RenewSlack = 0
	}
	if c.PKI != nil {
		cfg.BindAddr, cfg.Advertise, cfg.TLS = c.cands[i].Raft, c.cands[i].Raft, c.PKI.Store(c.cands[i].Machine)
	}
	return cfg
}

func (c *Cluster) startNode(i int, trans raft.Transport, ln net.Listener) {
	c.t.Helper()
	if trans != nil && c.opts.Transport != nil {
		trans = c.opts.Transport(i, trans)
	}
	cfg := c.nodeConfig(i, trans)
	node, err := cluster.New(cfg)
	if err != nil {
		c.t.Fatalf("cluster.New(%s): %v", c.cands[i].Machine, err)
	}
	deps := api.Deps{Node: node, Tokens: c.Tokens, TLS: cfg.TLS, VerifyClients: c.opts.VerifyClients}
	if c.opts.API != nil {
		c.opts.API(i, &deps)
	}
	srv := api.New(deps)
	n := c.Nodes[i]
	n.Node, n.Server, n.ln, n.stopped = node, srv, ln, false
	go func() { _ = srv.Serve(ln) }()
}

// StopNode stops node i (leadership handed over if it led).
func (c *Cluster) StopNode(i int) {
	n := c.Nodes[i]
	if n.stopped {
		return
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = n.Server.Shutdown(ctx)
	_ = n.ln.Close()
	_ = n.Node.Close(ctx)
}

// RestartNode starts a stopped node again on the same addresses and data dir.
func (c *Cluster) RestartNode(i int) {
	c.t.Helper()
	if !c.Nodes[i].stopped {
		c.t.Fatalf("RestartNode(%d): node is running", i)
	}
	var trans raft.Transport
	if c.PKI == nil {
		tcp, err := raft.NewTCPTransport(c.cands[i].Raft, nil, 3, 2*time.Second, nil)
		if err != nil {
			c.t.Fatalf("raft transport: %v", err)
		}
		trans = tcp
	}
	ln, err := net.Listen("tcp", strings.SplitN(c.Nodes[i].URL, "://", 2)[1])
	if err != nil {
		c.t.Fatalf("listen: %v", err)
	}
	c.startNode(i, trans, ln)
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for i := range c.Nodes {
		c.StopNode(i)
	}
}

// Leader waits for a ready leader and returns its index.
func (c *Cluster) Leader() int {
	c.t.Helper()
	idx := -1
	c.WaitFor("a ready leader", 10*time.Second, func() bool {
		for i, n := range c.Nodes {
			if !n.stopped && n.Node.IsLeader() && n.Node.Ready() {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// Follower returns the index of a running follower.
func (c *Cluster) Follower() int {
	c.t.Helper()
	leader := c.Leader()
	for i, n := range c.Nodes {
		if i != leader && !n.stopped {
			c.WaitFor("follower ready", 10*time.Second, n.Node.Ready)
			return i
		}
	}
	c.t.Fatalf("no running follower")
	return -1
}

// WaitReady waits until every running node is ready.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	for _, n := range c.Nodes {
		if !n.stopped {
			c.WaitFor(n.Machine+" ready", 10*time.Second, n.Node.Ready)
		}
	}
}

// WaitApplied waits until every running node applied at least the leader's commit index.
func (c *Cluster) WaitApplied() {
	c.t.Helper()
	leader := c.Nodes[c.Leader()]
	target := leader.Node.FSM().AppliedIndex()
	for _, n := range c.Nodes {
		if !n.stopped {
			c.WaitFor(n.Machine+" caught up", 10*time.Second, func() bool { return n.Node.FSM().AppliedIndex() >= target })
		}
	}
}

// WaitFor polls cond every 5 ms until it holds, failing the test after d.
func (c *Cluster) WaitFor(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	testutil.WaitFor(c.t, what, d, cond)
}
