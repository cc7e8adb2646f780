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
	"strings"
	"sync"
	"syscall"
	"time"

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

	mu     sync.Mutex
	cmd    *exec.Cmd     // guarded by mu; nil when not running
	exited chan struct{} // guarded by mu; closed when cmd has been waited for
	epoch  int           // guarded by mu; incremented at every start
	paused bool          // guarded by mu
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
	var cands []string
	for i, ip := range cfg.IPs {
		cands = append(cands, fmt.Sprintf("    - { machine: %s, url: %s://%s:%d, raft: %s:%d }", NodeName(i), scheme, ip, HTTPPort, ip, RaftPort))
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
		tlsYAML := "tls:     { allow_plaintext: true }"
		if cfg.TLS {
			tlsYAML = fmt.Sprintf("tls:     { ca_file: %s, cert_file: %s, key_file: %s }", filepath.Join(tlsDir, "ca.pem"),
				filepath.Join(tlsDir, name+".pem"), filepath.Join(tlsDir, name+"-key.pem"))
		}
		yaml := fmt.Sprintf(`node:    { id: %s, data_dir: %s }
http:    { addr: "%s:%d", advertise: "%s://%s:%d" }
raft:    { addr: "%s:%d", advertise: "%s:%d", heartbeat_timeout: %s, election_timeout: %s, leader_lease_timeout: %s }
cluster:
  bootstrap: true
  candidates:
%s
tokens:  { file: %s }
%s
`, name, n.DataDir, ip, HTTPPort, scheme, ip, HTTPPort, ip, RaftPort, ip, RaftPort, et, et, et/2, strings.Join(cands, "\n"), tokFile, tlsYAML)
		if err := os.WriteFile(n.config, []byte(yaml), 0o600); err != nil {
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

// Start launches node i (which must not be running).
func (c *Cluster) Start(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("%s is already running", n.Name)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.epoch++
	fmt.Fprintf(logf, "=== chaos: start %s epoch %d at %s\n", n.Name, n.epoch, time.Now().Format(time.RFC3339Nano))
	cmd := c.cfg.Launch(i, c.cfg.Bin, "serve", "--config", n.config)
	cmd.Env = append(os.Environ(), "ELANOUS_CHAOS_CLOCK_OFFSET_FILE="+n.ClockFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		fmt.Fprintf(logf, "=== chaos: %s epoch exited: %v\n", n.Name, cmd.ProcessState)
		logf.Close()
		close(done)
	}()
	n.cmd, n.exited, n.paused = cmd, done, false
	return nil
}

// signal sends sig to node i's process group; it reports whether the node
// was running.
func (c *Cluster) signal(i int, sig syscall.Signal) (chan struct{}, bool) {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return nil, false
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, sig)
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return n.exited, true
}

func (c *Cluster) reap(i int, exited chan struct{}) {
	<-exited
	n := c.Nodes[i]
	n.mu.Lock()
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
}

// Kill SIGKILLs node i and waits for it to exit.
func (c *Cluster) Kill(i int) {
	if exited, ok := c.signal(i, syscall.SIGKILL); ok {
		c.reap(i, exited)
	}
}

// Stop asks node i to shut down (SIGTERM) and waits up to timeout before
// SIGKILLing it. It reports whether the node exited on its own.
func (c *Cluster) Stop(i int, timeout time.Duration) bool {
	c.Resume(i)
	exited, ok := c.signal(i, syscall.SIGTERM)
	if !ok {
		return true
	}
	select {
	case <-exited:
		c.reap(i, exited)
		return true
	case <-time.After(timeout):
		c.Kill(i)
		return false
	}
}

// Pause SIGSTOPs node i; Resume SIGCONTs it.
func (c *Cluster) Pause(i int) { c.signal(i, syscall.SIGSTOP) }

// Resume SIGCONTs node i if it is paused.
func (c *Cluster) Resume(i int) {
	n := c.Nodes[i]
	n.mu.Lock()
	paused := n.paused
	n.mu.Unlock()
	if paused {
		c.signal(i, syscall.SIGCONT)
	}
}

// Running reports whether node i's process is alive (paused counts).
func (c *Cluster) Running(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Restart kills node i and starts it again.
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
	var st wire.ClusterStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Nodes[i].URL+"/v1/cluster/status", nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Tokens.Query)
	resp, err := c.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: status %d: %s", c.Nodes[i].Name, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return st, json.Unmarshal(body, &st)
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

// Statuses reads every node's status concurrently; a node that did not answer
// has a nil entry.
func (c *Cluster) Statuses(ctx context.Context) []*wire.ClusterStatus {
	out := make([]*wire.ClusterStatus, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if st, err := c.Status(ctx, i); err == nil {
				out[i] = &st
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader returns the index of the node that says it leads (the highest term
// among those that do) and is ready, or -1.
func (c *Cluster) Leader(ctx context.Context) int {
	best, term := -1, uint64(0)
	for i, st := range c.Statuses(ctx) {
		if st != nil && st.State == "Leader" && st.Ready && st.Term >= term {
			best, term = i, st.Term
		}
	}
	return best
}

// WaitLeader polls until a ready leader is known, other than any in not.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration, not ...int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l := c.Leader(ctx)
		if l >= 0 && !contains(not, l) {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader within %s", timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// ErrDiverged is returned by WaitConverged when nodes keep reporting different
// state hashes at one applied index.
var ErrDiverged = errors.New("state diverged")

// WaitConverged polls until every node answers with the same applied index
// and state hash. Nodes that report one applied index with different hashes
// in three polls in a row fail with ErrDiverged (a single such poll can be a
// status read racing an apply).
func (c *Cluster) WaitConverged(ctx context.Context, timeout time.Duration) ([]*wire.ClusterStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []*wire.ClusterStatus
	mismatches := 0
	for {
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
				return sts, fmt.Errorf("%w: %s", ErrDiverged, mismatch)
			}
		} else {
			mismatches = 0
			if same {
				return sts, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("nodes did not converge within %s: %s", timeout, describe(c, last))
		case <-time.After(150 * time.Millisecond):
		}
	}
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
