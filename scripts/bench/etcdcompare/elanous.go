package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/wire"
)

// TTLs of the records the benchmark writes.
const (
	benchTTLMs = 600_000        // a member's resource TTL
	leaseTTLMs = 60_000         // lock row leases
	fillTTLMs  = 24 * 3_600_000 // the longest a resource may live: fill records outlive the run
)

// benchID is client i's resource.
func benchID(i int) string { return fmt.Sprintf("instance:bench/%d", i) }

// registerBody is the JSON of a register request; etcd rows put the same
// bytes as their value, so both sides carry the same payload.
func registerBody(id, machine string, ttlMs int64) []byte {
	b, err := json.Marshal(wire.RegisterRequest{ID: id, Kind: "instance", Name: id, Machine: machine,
		Endpoint: "http://" + machine + ".invalid:8080", TTLMs: ttlMs})
	if err != nil {
		panic(err) // a fixed struct of strings and ints always encodes
	}
	return b
}

// elanousSystem is a three-candidate elanous-node cluster: three `serve`
// processes on loopback, each with its own data dir and config, on the
// default settings, plaintext.
type elanousSystem struct {
	dir, bin, version string
	procs             *procs
	nodes             []*elanousNode
	token             string // the member token
	adminToken        string // the admin token (snapshot saves)
	queryToken        string // the query token (blocking watches, as a member's resolver sends)
	env, passed       []string
	status            *http.Client
}

type elanousNode struct {
	server
	config, url string
}

// newElanousSystem builds elanous-node from the working tree repo into dir.
func newElanousSystem(ctx context.Context, repo, dir string, p *procs) (*elanousSystem, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &elanousSystem{dir: dir, bin: filepath.Join(dir, "elanous-node"), procs: p,
		status: &http.Client{Timeout: time.Second}}
	b := testcluster.Build{Dir: repo, Pkg: "./cmd/elanous-node", Out: s.bin, Env: []string{"GOWORK=off"}}
	if err := b.Run(ctx); err != nil {
		return nil, fmt.Errorf("build elanous-node: %w", err)
	}
	out, err := exec.CommandContext(ctx, s.bin, "version").Output()
	if err != nil {
		return nil, fmt.Errorf("elanous-node version: %w", err)
	}
	s.version = strings.TrimSpace(string(out))
	s.env, s.passed = elanousEnv()
	return s, nil
}

// elanousEnv is this process's environment for the nodes: ELANOUS_*
// variables that name a node's identity, addresses, candidates or tokens are
// dropped (the benchmark sets those in each node's config); the others are
// passed on, and returned as passed, to tune what is measured.
func elanousEnv() (env, passed []string) {
	owned := []string{"ELANOUS_TOKEN", "ELANOUS_NODE_", "ELANOUS_HTTP_ADDR", "ELANOUS_HTTP_ADVERTISE",
		"ELANOUS_RAFT_ADDR", "ELANOUS_RAFT_ADVERTISE", "ELANOUS_CLUSTER_", "ELANOUS_TOKENS_"}
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, "ELANOUS_") {
			env = append(env, kv)
			continue
		}
		drop := false
		for _, o := range owned {
			if key == o || (strings.HasSuffix(o, "_") && strings.HasPrefix(key, o)) {
				drop = true
			}
		}
		if !drop {
			env = append(env, kv)
			passed = append(passed, kv)
		}
	}
	return env, passed
}

func (s *elanousSystem) passedEnv() []string { return s.passed }
func (s *elanousSystem) Name() string        { return "elanous" }
func (s *elanousSystem) Version() string     { return s.version }

func (s *elanousSystem) Logs() []string { return logPaths(s.nodes) }

func (s *elanousSystem) Start(ctx context.Context) error {
	ports, err := testcluster.FreePorts(6)
	if err != nil {
		return err
	}
	var cands []testcluster.Candidate
	for i := range 3 {
		cands = append(cands, testcluster.Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i),
			URL: fmt.Sprintf("http://127.0.0.1:%d", ports[i]), Raft: fmt.Sprintf("127.0.0.1:%d", ports[3+i])})
	}
	for i, cand := range cands {
		ndir := filepath.Join(s.dir, cand.Machine)
		n := &elanousNode{server: server{name: cand.Machine, dataDir: filepath.Join(ndir, "data"), logPath: filepath.Join(ndir, "node.log")},
			config: filepath.Join(ndir, "elanous.yaml"), url: cand.URL}
		if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
			return err
		}
		nc := testcluster.NodeConfig{ID: n.name, DataDir: n.dataDir, URL: n.url, Raft: cands[i].Raft,
			Candidates: cands, TokensFile: n.tokensFile()}
		doc := nc.Doc()
		doc["limits"] = map[string]any{"write_rate": 0} // no write rate limit: every client is on 127.0.0.1
		if err := testcluster.WriteConfig(n.config, doc); err != nil {
			return err
		}
		s.nodes = append(s.nodes, n)
	}
	if err := s.initTokens(ctx); err != nil {
		return err
	}
	for i := range s.nodes {
		if err := s.startNode(i); err != nil {
			return err
		}
	}
	return s.WaitHealthy(ctx)
}

func (n *elanousNode) tokensFile() string { return filepath.Join(n.dataDir, "control", "tokens.json") }

// initTokens creates the cluster tokens file on node-a with `elanous-node
// init`, copies it (mode 0600) to the other candidates as an operator would,
// and reads the member token from it.
func (s *elanousSystem) initTokens(ctx context.Context) error {
	var files []string
	for _, n := range s.nodes {
		files = append(files, n.tokensFile())
	}
	t, err := testcluster.InitTokens(ctx, s.bin, s.env, files...)
	if err != nil {
		return err
	}
	if !wire.ValidToken(t.Member) {
		return errors.New("tokens file has no well-formed member token")
	}
	s.token, s.queryToken, s.adminToken = t.Member, t.Query, t.Admin
	return nil
}

func (s *elanousSystem) startNode(i int) error {
	n := s.nodes[i]
	return n.start(s.procs, s.bin, []string{"serve", "--config", n.config}, s.env)
}

func (s *elanousSystem) Stop() { killAll(s.nodes) }

// urls are the nodes' API URLs.
func (s *elanousSystem) urls() []string {
	var out []string
	for _, n := range s.nodes {
		out = append(out, n.url)
	}
	return out
}

// WaitHealthy waits until every node answers /v1/ready, every node names the
// same primary and generation, and a register through the leader succeeds.
func (s *elanousSystem) WaitHealthy(ctx context.Context) error {
	hc := newHTTPClient()
	defer hc.CloseIdleConnections()
	return testcluster.WaitFor(ctx, "a healthy elanous cluster", 60*time.Second, pollEvery, func(ctx context.Context) error {
		for _, n := range s.nodes {
			if n.p.Exited() {
				return fmt.Errorf("%s exited", n.name)
			}
			if err := s.get(ctx, n.url+"/v1/ready"); err != nil {
				return fmt.Errorf("%s not ready: %w", n.name, err)
			}
		}
		if _, err := testcluster.AgreedPrimary(ctx, s.status, s.urls()); err != nil {
			return err
		}
		l, err := s.Leader(ctx)
		if err != nil {
			return err
		}
		c := &elClient{url: s.nodes[l].url, token: s.token, http: hc, timeout: time.Second}
		return c.register(ctx, registerBody("instance:bench/health", "bench", benchTTLMs))
	})
}

func (s *elanousSystem) get(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.status.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// Leader is the index of the holder of the newest claim any node knows.
func (s *elanousSystem) Leader(ctx context.Context) (int, error) {
	p, err := testcluster.NewestPrimary(ctx, s.status, s.urls())
	if err != nil {
		return 0, err
	}
	for i, n := range s.nodes {
		if n.name == p.Holder {
			return i, nil
		}
	}
	return 0, fmt.Errorf("the primary %q is no candidate", p.Holder)
}

// elClient is one benchmark client of the HTTP API: one keep-alive
// connection to one candidate, the member token.
type elClient struct {
	url, token string
	http       *http.Client
	timeout    time.Duration
}

// newHTTPClient makes a client that keeps one connection to each host.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true}}
}

// apiError is a refusal by the server.
type apiError struct {
	status int
	code   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }

// do sends one request and decodes a want answer into out (when not nil).
// Bodies are always read to the end so the connection is reused.
func (c *elClient) do(ctx context.Context, method, path string, body []byte, header http.Header, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		_, _ = io.Copy(io.Discard, resp.Body)
		return &apiError{status: resp.StatusCode, code: e.Error}
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

func (c *elClient) register(ctx context.Context, body []byte) error {
	return c.do(ctx, http.MethodPost, "/v1/resources/register", body, nil, http.StatusOK, nil)
}

func (c *elClient) heartbeat(ctx context.Context, id string) error {
	return c.heartbeatWith(ctx, id, []byte("{}"))
}

// heartbeatWith heartbeats id with body (a heartbeat request).
func (c *elClient) heartbeatWith(ctx context.Context, id string, body []byte) error {
	return c.do(ctx, http.MethodPost, "/v1/resources/"+url.PathEscape(id)+"/heartbeat", body, nil, http.StatusOK, nil)
}

// lockStep alternates a port lease acquire with its release. Each client
// leases for a machine of its own, as a fleet does (a machine may hold at most
// a quarter of the band).
func (c *elClient) lockStep(i int) step {
	body, err := json.Marshal(wire.AcquireRequest{Machine: fmt.Sprintf("bench-%d", i), Purpose: "bench", TTLMs: leaseTTLMs})
	if err != nil {
		panic(err) // a fixed struct of strings and ints always encodes
	}
	var held *wire.PortLease
	return func(ctx context.Context) error {
		if held == nil {
			var l wire.PortLease
			if err := c.do(ctx, http.MethodPost, "/v1/leases/port", body, nil, http.StatusCreated, &l); err != nil {
				return err
			}
			held = &l
			return nil
		}
		l := held
		held = nil
		return c.do(ctx, http.MethodDelete, "/v1/leases/port/"+strconv.Itoa(l.Port),
			nil, http.Header{wire.HeaderPortLeaseID: {l.LeaseID}}, http.StatusNoContent, nil)
	}
}

// clients makes n API clients: client i on node i%3, or all on node only
// when only ≥ 0.
func (s *elanousSystem) clients(n, only int, timeout time.Duration) []*elClient {
	var cs []*elClient
	for i := range n {
		node := s.nodes[i%len(s.nodes)]
		if only >= 0 {
			node = s.nodes[only]
		}
		cs = append(cs, &elClient{url: node.url, token: s.token, http: newHTTPClient(), timeout: timeout})
	}
	return cs
}

func closeIdle(cs []*elClient) {
	for _, c := range cs {
		c.http.CloseIdleConnections()
	}
}

func (s *elanousSystem) Fill(ctx context.Context, shape fillShape, n, clients int, progress func(int)) error {
	cs := s.clients(clients, -1, requestTimeout)
	defer closeIdle(cs)
	return runParallel(ctx, n, clients, func(ctx context.Context, w, i int) error {
		body := shape.register(i)
		return retry(ctx, 10, func(ctx context.Context) error { return cs[w].register(ctx, body) })
	}, progress)
}

func (s *elanousSystem) Workers(ctx context.Context, row string, n int) ([]step, func(), error) {
	only, err := rowNode(ctx, s, row)
	if err != nil {
		return nil, nil, err
	}
	cs := s.clients(n, only, requestTimeout)
	cleanup := func() { closeIdle(cs) }
	var steps []step
	for i, c := range cs {
		switch row {
		case rowWrite, rowSingle:
			body := registerBody(benchID(i), "bench", benchTTLMs)
			steps = append(steps, func(ctx context.Context) error { return c.register(ctx, body) })
		case rowLock:
			steps = append(steps, c.lockStep(i))
		case rowRenewal:
			id := benchID(i)
			if err := c.register(ctx, registerBody(id, "bench", benchTTLMs)); err != nil {
				cleanup()
				return nil, nil, fmt.Errorf("register the resource to heartbeat: %w", err)
			}
			steps = append(steps, func(ctx context.Context) error { return c.heartbeat(ctx, id) })
		case rowLoad:
			id := benchID(i)
			if err := c.register(ctx, registerBody(id, "bench", benchTTLMs)); err != nil {
				cleanup()
				return nil, nil, fmt.Errorf("register the resource to publish a load on: %w", err)
			}
			beat := 0
			steps = append(steps, func(ctx context.Context) error {
				beat++
				return c.heartbeatWith(ctx, id, loadBeat(i, beat))
			})
		default:
			cleanup()
			return nil, nil, fmt.Errorf("unknown row %q", row)
		}
	}
	if err := warmUp(ctx, steps, row); err != nil {
		cleanup()
		return nil, nil, err
	}
	return steps, cleanup, nil
}

func (s *elanousSystem) Writer(ctx context.Context, i int) (step, func(), error) {
	c := &elClient{url: s.nodes[i].url, token: s.token, http: newHTTPClient(), timeout: failoverAttemptTimeout}
	body := registerBody("instance:bench/failover", "bench", benchTTLMs)
	return func(ctx context.Context) error { return c.register(ctx, body) }, func() { c.http.CloseIdleConnections() }, nil
}

func (s *elanousSystem) Kill(i int) error { return s.nodes[i].p.Kill() }

func (s *elanousSystem) Restart(ctx context.Context, i int) error {
	s.nodes[i].restarts++
	return s.startNode(i)
}

func (s *elanousSystem) Usage() []nodeUsage {
	return usageOf(s.nodes, "elanous", "raft.db", "raft", "raft.db")
}
