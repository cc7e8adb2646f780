// Package harness runs a cluster of real elanous-node processes for the chaos
// suite: it writes their configs and the shared tokens file, starts each
// `elanous-node serve` inside its own network namespace and in its own process
// group, and kills, pauses, resumes and restarts them. It also reads every
// node's /v1/cluster/status to find the leader and to wait for convergence.
// The processes, the config documents, the HTTP reads and the polling loop
// are internal/testcluster's, shared with the end-to-end tests and
// compare-etcd; what is the fault suite's own (namespaces, clock offsets,
// process epochs, convergence and divergence) is here.
package harness

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/wire"
)

// Ports every node uses on its own address.
const (
	HTTPPort = 31413
	RaftPort = 31412
)

// Launcher runs a command inside node i's namespace (netns.Net.Command).
type Launcher func(i int, name string, args ...string) *exec.Cmd

// Config describes a cluster to run.
type Config struct {
	Bin             string   // the elanous-node binary (a chaos build)
	Dir             string   // the run's directory: configs, data, logs
	IPs             []string // one address per node
	Launch          Launcher
	ElectionTimeout time.Duration
	// DataMount, when set, is called with each node's data dir before its
	// first start (the disk-full scenario mounts a small filesystem there).
	DataMount func(i int, dir string) error
	// TLS runs the cluster with TLS: "elanous-node tls ca" and "tls cert"
	// (the binary's own tooling) make a CA and a certificate per node in
	// Dir/tls, the API is HTTPS and Raft mutual TLS. Without it the nodes
	// run plaintext on their namespace addresses (tls.allow_plaintext).
	TLS bool
}

// Node is one candidate process.
type Node struct {
	Index     int
	Name      string
	IP        string
	URL       string
	DataDir   string
	LogPath   string
	ClockFile string
	config    string

	mu    sync.Mutex
	proc  *testcluster.Proc // guarded by mu; nil before the first start
	epoch int               // guarded by mu; incremented at every start
}

// Epoch is the node's process incarnation: it grows by one at every start.
func (n *Node) Epoch() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch
}

// Cluster is a set of nodes. Its methods may be called concurrently.
type Cluster struct {
	Nodes  []*Node
	Tokens wire.TokensFile
	cfg    Config
	client *http.Client
	tls    *tls.Config // trusts the cluster CA; nil without TLS
}

// NodeName names node i ("node-a", "node-b", …).
func NodeName(i int) string { return "node-" + string(rune('a'+i)) }

// New writes the tokens file and every node's config; it starts nothing.
func New(cfg Config) (*Cluster, error) {
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = 500 * time.Millisecond
	}
	scheme, tlsDir := "http", filepath.Join(cfg.Dir, "tls")
	c := &Cluster{cfg: cfg}
	if cfg.TLS {
		scheme = "https"
		var err error
		if c.tls, err = makeTLS(cfg.Bin, tlsDir, cfg.IPs); err != nil {
			return nil, err
		}
	}
	c.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: c.tls}}
	var err error
	if c.Tokens, err = NewTokens(); err != nil {
		return nil, err
	}
	var cands []testcluster.Candidate
	for i, ip := range cfg.IPs {
		cands = append(cands, testcluster.Candidate{Machine: NodeName(i), URL: fmt.Sprintf("%s://%s:%d", scheme, ip, HTTPPort),
			Raft: fmt.Sprintf("%s:%d", ip, RaftPort)})
	}
	for i, ip := range cfg.IPs {
		name := NodeName(i)
		n := &Node{Index: i, Name: name, IP: ip, URL: fmt.Sprintf("%s://%s:%d", scheme, ip, HTTPPort),
			DataDir:   filepath.Join(cfg.Dir, name, "data"),
			LogPath:   filepath.Join(cfg.Dir, name, "node.log"),
			ClockFile: filepath.Join(cfg.Dir, name, "clock-offset"),
			config:    filepath.Join(cfg.Dir, name, "elanous.yaml"),
		}
		if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
			return nil, err
		}
		if cfg.DataMount != nil {
			if err := cfg.DataMount(i, n.DataDir); err != nil {
				return nil, fmt.Errorf("mount data dir of %s: %w", name, err)
			}
		}
		tokFile := filepath.Join(n.DataDir, "control", "tokens.json")
		if err := WriteTokens(tokFile, c.Tokens); err != nil {
			return nil, err
		}
		et := cfg.ElectionTimeout
		nc := testcluster.NodeConfig{ID: name, DataDir: n.DataDir, URL: n.URL, Raft: cands[i].Raft, Candidates: cands,
			TokensFile: tokFile, Heartbeat: et, Election: et, LeaderLease: et / 2}
		if cfg.TLS {
			nc.TLS = &testcluster.TLSFiles{CA: filepath.Join(tlsDir, "ca.pem"), Cert: filepath.Join(tlsDir, name+".pem"),
				Key: filepath.Join(tlsDir, name+"-key.pem")}
		}
		doc := nc.Doc()
		if !cfg.TLS {
			doc["tls"] = map[string]any{"allow_plaintext": true}
		}
		if err := testcluster.WriteConfig(n.config, doc); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// Attach returns a Cluster over nodes started by someone else (containers):
// only its status methods work. tlsConfig, when not nil, is how clients
// verify the nodes (https:// urls); ClientTLS returns it.
func Attach(names, urls []string, tokens wire.TokensFile, tlsConfig *tls.Config) *Cluster {
	c := &Cluster{Tokens: tokens, tls: tlsConfig,
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlsConfig}}}
	for i := range names {
		c.Nodes = append(c.Nodes, &Node{Index: i, Name: names[i], URL: urls[i]})
	}
	return c
}

// Start launches node i (which must not be running), its output appended
// to its log between "=== chaos:" lines naming its epoch.
func (c *Cluster) Start(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("%s is already running", n.Name)
	}
	n.epoch++
	p, err := testcluster.Start(testcluster.Spec{
		Name: fmt.Sprintf("%s epoch %d", n.Name, n.epoch), Path: c.cfg.Bin, Args: []string{"serve", "--config", n.config},
		Env:     append(os.Environ(), "ELANOUS_CHAOS_CLOCK_OFFSET_FILE="+n.ClockFile),
		Command: func(name string, args ...string) *exec.Cmd { return c.cfg.Launch(i, name, args...) },
		Stdout:  n.LogPath, Group: true, Banner: "chaos",
	})
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// proc is node i's latest process, or nil.
func (c *Cluster) proc(i int) *testcluster.Proc {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Kill SIGKILLs node i's process group and waits for it to exit.
func (c *Cluster) Kill(i int) {
	if p := c.proc(i); p != nil {
		_ = p.Kill()
	}
}

// Stop asks node i to shut down (SIGTERM, after SIGCONT if it is paused)
// and waits up to timeout before SIGKILLing it. It reports whether the node
// exited on its own.
func (c *Cluster) Stop(i int, timeout time.Duration) bool {
	p := c.proc(i)
	return p == nil || !errors.Is(p.Stop(timeout), testcluster.ErrKilled)
}

// Pause SIGSTOPs node i; Resume SIGCONTs it.
func (c *Cluster) Pause(i int) {
	if p := c.proc(i); p != nil {
		_ = p.Pause()
	}
}

// Resume SIGCONTs node i if it is paused.
func (c *Cluster) Resume(i int) {
	if p := c.proc(i); p != nil {
		_ = p.Resume()
	}
}

// Running reports whether node i's process is alive (paused counts).
func (c *Cluster) Running(i int) bool {
	p := c.proc(i)
	return p != nil && !p.Exited()
}

// Restart kills node i and starts it again on its data dir.
func (c *Cluster) Restart(i int) error {
	c.Kill(i)
	return c.Start(i)
}

// SetClockOffset writes node i's wall-clock offset (read by a chaos build).
func (c *Cluster) SetClockOffset(i int, d time.Duration) error {
	return os.WriteFile(c.Nodes[i].ClockFile, []byte(d.String()), 0o644)
}

// Close kills every node.
func (c *Cluster) Close() {
	for i := range c.Nodes {
		c.Resume(i)
		c.Kill(i)
	}
}
