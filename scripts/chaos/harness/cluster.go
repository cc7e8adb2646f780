// Package harness runs a cluster of real elanous-node processes for the chaos
// suite: it writes their configs and the shared tokens file, starts each
// `elanous-node serve` inside its own network namespace and in its own process
// group, and kills, pauses, resumes and restarts them. It also reads every
// node's /v1/cluster/status to find the leader and to wait for convergence.
package harness

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// makeTLS makes the cluster's CA and a certificate per node (its name and
// its address) in dir with the binary's "tls ca" and "tls cert", and returns
// a client configuration that trusts the CA.
func makeTLS(bin, dir string, ips []string) (*tls.Config, error) {
	run := func(args ...string) error {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("elanous-node %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("tls", "ca", "--out", dir); err != nil {
		return nil, err
	}
	for i, ip := range ips {
		if err := run("tls", "cert", "--ca-dir", dir, "--machine", NodeName(i), "--ip", ip, "--out", dir); err != nil {
			return nil, err
		}
	}
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", filepath.Join(dir, "ca.pem"))
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS returns a client configuration that trusts the cluster's CA, or
// nil for a plaintext cluster.
func (c *Cluster) ClientTLS() *tls.Config { return c.tls }

// CAFile returns the path of the cluster CA's certificate (PEM), or "" for
// a plaintext cluster.
func (c *Cluster) CAFile() string {
	if c.tls == nil || c.cfg.Dir == "" {
		return ""
	}
	return filepath.Join(c.cfg.Dir, "tls", "ca.pem")
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

// NewTokens draws the three cluster tokens.
func NewTokens() (wire.TokensFile, error) {
	var t wire.TokensFile
	for _, p := range []*string{&t.Admin, &t.Member, &t.Query} {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return t, err
		}
		*p = hex.EncodeToString(b)
	}
	return t, nil
}

// WriteTokens writes a tokens file with mode 0600, creating its directory.
func WriteTokens(path string, t wire.TokensFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(t)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
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

// Status reads node i's /v1/cluster/status.
func (c *Cluster) Status(ctx context.Context, i int) (wire.ClusterStatus, error) {
	st, err := testcluster.Status(ctx, c.client, c.Nodes[i].URL, c.Tokens.Query)
	if err != nil {
		return st, fmt.Errorf("%s: %w", c.Nodes[i].Name, err)
	}
	return st, nil
}

// Metrics reads node i's /metrics (Prometheus text) with the query token.
func (c *Cluster) Metrics(ctx context.Context, i int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Nodes[i].URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.Tokens.Query)
	resp, err := c.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: /metrics: status %d", c.Nodes[i].Name, resp.StatusCode)
	}
	return string(body), err
}

// Statuses reads every node's status concurrently, each bounded by a
// second; a node that did not answer has a nil entry.
func (c *Cluster) Statuses(ctx context.Context) []*wire.ClusterStatus {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	return testcluster.Statuses(ctx, c.client, urls, c.Tokens.Query)
}

// Leader returns the index of the node that says it leads (the highest term
// among those that do) and is ready, or -1.
func (c *Cluster) Leader(ctx context.Context) int { return testcluster.Leader(c.Statuses(ctx)) }

// WaitLeader polls until a ready leader is known, other than any in not.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration, not ...int) (int, error) {
	l := -1
	err := testcluster.WaitFor(ctx, "a ready leader", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		sts := c.Statuses(ctx)
		if l = testcluster.Leader(sts); l < 0 || slices.Contains(not, l) {
			return fmt.Errorf("none other than %v: %s", not, describe(c, sts))
		}
		return nil
	})
	if err != nil {
		return -1, err
	}
	return l, nil
}

// ErrDiverged is returned by WaitConverged when nodes keep reporting different
// state hashes at one applied index.
var ErrDiverged = errors.New("state diverged")

// WaitConverged polls until every node answers with the same applied index
// and state hash. Nodes that report one applied index with different hashes
// in three polls in a row fail with ErrDiverged (a single such poll can be a
// status read racing an apply).
func (c *Cluster) WaitConverged(ctx context.Context, timeout time.Duration) ([]*wire.ClusterStatus, error) {
	var last []*wire.ClusterStatus
	mismatches := 0
	err := testcluster.WaitFor(ctx, "the nodes to converge", timeout, 150*time.Millisecond, func(ctx context.Context) error {
		sts := c.Statuses(ctx)
		last = sts
		byIndex := map[uint64]string{}
		same, mismatch := true, ""
		for i, st := range sts {
			if st == nil {
				same = false
				continue
			}
			if h, ok := byIndex[st.AppliedIndex]; ok && h != st.StateHash {
				mismatch = fmt.Sprintf("%s has hash %s at index %d, another node %s", c.Nodes[i].Name, st.StateHash, st.AppliedIndex, h)
			}
			byIndex[st.AppliedIndex] = st.StateHash
			if sts[0] == nil || st.AppliedIndex != sts[0].AppliedIndex || st.StateHash == "" {
				same = false
			}
		}
		if mismatch != "" {
			if mismatches++; mismatches >= 3 {
				return testcluster.Final(fmt.Errorf("%w: %s", ErrDiverged, mismatch))
			}
			return errors.New(mismatch)
		}
		mismatches = 0
		if !same {
			return errors.New(describe(c, sts))
		}
		return nil
	})
	return last, err
}

func describe(c *Cluster, sts []*wire.ClusterStatus) string {
	var parts []string
	for i, st := range sts {
		if st == nil {
			parts = append(parts, c.Nodes[i].Name+"=unreachable")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s/t%d/applied%d/%s", c.Nodes[i].Name, st.State, st.Term, st.AppliedIndex, short(st.StateHash)))
	}
	return strings.Join(parts, " ")
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// PanicLines returns the lines of every node log that show a panic or a
// fatal runtime error.
func (c *Cluster) PanicLines() []string {
	var out []string
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.Contains(line, "DATA RACE") {
				out = append(out, n.Name+": "+line)
			}
		}
	}
	return out
}
