package main

// Helpers of the end-to-end tests (e2e_test.go): they build the elanous-node
// binary once, write one config file per candidate, run real `serve`
// processes on loopback with their output captured in t.TempDir, and talk to
// them over HTTP. Every wait polls with a deadline.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestMain removes the directory of the binary the e2e tests build, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBuild.dir != "" {
		os.RemoveAll(e2eBuild.dir)
	}
	os.Exit(code)
}

// e2eBuild holds the binary built once for all end-to-end tests.
var e2eBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// e2eBinary returns the path of the elanous-node binary, building it on first
// use (with -race when this test binary has it, so the nodes' output is
// checked for data races) into a temporary directory TestMain removes. The
// end-to-end tests are skipped under -short.
func e2eBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: runs real elanous-node processes; skipped with -short")
	}
	e2eBuild.once.Do(func() {
		if e2eBuild.dir, e2eBuild.err = os.MkdirTemp("", "elanous-e2e-bin-"); e2eBuild.err != nil {
			return
		}
		e2eBuild.path = filepath.Join(e2eBuild.dir, "elanous-node")
		b := testcluster.Build{Dir: ".", Pkg: ".", Out: e2eBuild.path, Race: testcluster.RaceEnabled()}
		e2eBuild.err = b.Run(context.Background())
	})
	if e2eBuild.err != nil {
		t.Fatalf("build elanous-node: %v", e2eBuild.err)
	}
	return e2eBuild.path
}

// childEnv is the environment of the processes the tests start: this
// process's, without ELANOUS_* variables (so a developer's settings cannot
// leak into a node's configuration), plus extra. A -race binary otherwise
// sleeps 1 s at exit (GORACE atexit_sleep_ms); 100 ms is enough here.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ELANOUS_") {
			env = append(env, kv)
		}
	}
	if _, set := os.LookupEnv("GORACE"); !set {
		env = append(env, "GORACE=atexit_sleep_ms=100")
	}
	return append(env, extra...)
}

// proc is one process started by a test (testcluster.Proc) and where its
// output is; a proc with a nil Proc only names a past run's output (for
// checkLogs).
type proc struct {
	*testcluster.Proc
	name   string
	stdout string // path of the captured stdout
	stderr string // path of the captured stderr
}

// startProc starts the binary with args, its output captured in files under
// dir named after name. A cleanup stops it (SIGTERM, then SIGKILL after 10 s)
// and, if the test failed, logs the tail of its output.
func startProc(t *testing.T, dir, name string, env []string, args ...string) *proc {
	t.Helper()
	return startProcBin(t, e2eBinary(t), dir, name, env, args...)
}

// startProcBin is startProc with another binary (an earlier release's).
func startProcBin(t *testing.T, bin, dir, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, stdout: filepath.Join(dir, name+".stdout"), stderr: filepath.Join(dir, name+".stderr")}
	var err error
	p.Proc, err = testcluster.Start(testcluster.Spec{Name: name, Path: bin, Args: args, Env: env, Stdout: p.stdout, Stderr: p.stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(t, 10*time.Second)
		if t.Failed() {
			p.dump(t)
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *proc) exited() bool { return p.Exited() }

// signal sends sig to the process unless it has exited.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

// wait waits up to timeout for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) (int, error) { return p.Wait(timeout) }

// stop sends SIGTERM and, if the process has not exited after timeout,
// SIGKILL. A process that needs SIGKILL or exits non-zero after SIGTERM
// fails the test.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	if p.exited() {
		return
	}
	start := time.Now()
	if err := p.Stop(timeout); err != nil {
		t.Errorf("%v", err)
		return
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Logf("%s took %s to exit after SIGTERM", p.name, d.Round(time.Millisecond))
	}
	if code := p.ExitCode(); code != 0 {
		t.Errorf("%s exit code after SIGTERM = %d, want 0 (%v)", p.name, code, p.Err())
	}
}

// output returns the captured stdout and stderr so far.
func (p *proc) output() (stdout, stderr string) {
	o, _ := os.ReadFile(p.stdout)
	e, _ := os.ReadFile(p.stderr)
	return string(o), string(e)
}

// dump logs the last 12 KiB of the process's stdout and stderr.
func (p *proc) dump(t *testing.T) {
	t.Helper()
	stdout, stderr := p.output()
	tail := func(s string) string {
		const keep = 12 << 10
		if len(s) > keep {
			return "…" + s[len(s)-keep:]
		}
		return s
	}
	t.Logf("==== %s stdout (%s) ====\n%s", p.name, p.stdout, tail(stdout))
	t.Logf("==== %s stderr (%s) ====\n%s", p.name, p.stderr, tail(stderr))
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (testcluster.FreePorts; the tests accept its small race).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := testcluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// e2eNode is one candidate of a test cluster: its config file and, while it
// runs, its process.
type e2eNode struct {
	id      string
	dir     string // holds the config file and the captured output
	dataDir string
	config  string // path of the node's elanous.yaml
	tokens  string // path of the node's tokens file
	url     string // http://127.0.0.1:port, https:// with TLS
	raft    string // 127.0.0.1:port
	proc    *proc
	starts  int
	// cert and key are the node's certificate files with TLS.
	cert, key string
}

// e2eCluster is a cluster of real `elanous-node serve` processes on loopback.
type e2eCluster struct {
	t      *testing.T
	nodes  []*e2eNode
	tokens wire.TokensFile
	// caFile is the cluster CA with TLS (see newE2ETLSCluster); "" without.
	caFile string
}

// e2eTimeouts are the Raft timings the test clusters run with: the short
// timeouts docs/http-api.md recommends where a 2 s failover bound matters even when
// nothing refuses (a dead machine, a partition; raft.fast_failover covers only
// a dead process). With the 500 ms defaults and no fast failover, failover
// measured 0.66–1.56 s over 60 kills, but a pre-vote refused by a survivor that
// has not yet timed out costs a whole randomized election timeout, and 2 of
// about 100 kills took 2.0 s.
const (
	e2eHeartbeat   = 300 * time.Millisecond
	e2eElection    = 300 * time.Millisecond
	e2eLeaderLease = 150 * time.Millisecond
)

// newE2ECluster writes the config files of n candidates named node-1…node-n
// on free loopback ports, and one tokens file per node (same content, mode
// 0600, created by `elanous-node init --file` for the first). It starts
// nothing.
func newE2ECluster(t *testing.T, n int) *e2eCluster {
	t.Helper()
	return buildE2ECluster(t, n, false)
}

// queryGet GETs path on nd with the query token and decodes the 200 answer
// into a T.
func queryGet[T any](c *e2eCluster, nd *e2eNode, path string) (T, error) {
	var v T
	r, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+path, c.tokens.Query, nil), http.StatusOK)
	if err != nil {
		return v, err
	}
	err = json.Unmarshal(r.Body, &v)
	return v, err
}

// startE2ECluster starts a 3-node cluster (newE2ECluster, startAll) and
// returns it with its leader and first claim; it skips the test with -short.
func startE2ECluster(t *testing.T) (*e2eCluster, *e2eNode, wire.Primary) {
	t.Helper()
	e2eBinary(t)
	c := newE2ECluster(t, 3)
	leader, claim := c.startAll()
	return c, leader, claim
}

// buildE2ECluster is newE2ECluster, with TLS (https URLs, certificates of
// the e2e CA for every node, tls.* in the configs) when withTLS is set.
func buildE2ECluster(t *testing.T, n int, withTLS bool) *e2eCluster {
	t.Helper()
	base := t.TempDir()
	ports := freePorts(t, 2*n)
	c := &e2eCluster{t: t}
	scheme := "http"
	if withTLS {
		scheme = "https"
		c.caFile = writeE2ECA(t, base)
	}
	for i := range n {
		id := fmt.Sprintf("node-%d", i+1)
		dir := filepath.Join(base, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		dataDir := filepath.Join(dir, "data")
		c.nodes = append(c.nodes, &e2eNode{
			id:      id,
			dir:     dir,
			dataDir: dataDir,
			config:  filepath.Join(dir, "elanous.yaml"),
			tokens:  filepath.Join(dataDir, "control", "tokens.json"),
			url:     fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			raft:    fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
		})
	}

	// Tokens: init writes the first node's file; the others get a copy.
	var files []string
	for _, nd := range c.nodes {
		files = append(files, nd.tokens)
	}
	var err error
	if c.tokens, err = testcluster.InitTokens(context.Background(), e2eBinary(t), childEnv(), files...); err != nil {
		t.Fatal(err)
	}

	for _, nd := range c.nodes {
		if withTLS {
			nd.cert, nd.key = issueE2ECert(t, nd.dir, nd.id)
		}
		c.writeConfig(nd, nil)
	}
	return c
}

// writeConfig writes nd's elanous.yaml; edit, when not nil, may change the
// document before it is written.
func (c *e2eCluster) writeConfig(nd *e2eNode, edit func(doc map[string]any)) {
	c.t.Helper()
	var cands []testcluster.Candidate
	for _, o := range c.nodes {
		cands = append(cands, testcluster.Candidate{Machine: o.id, URL: o.url, Raft: o.raft})
	}
	nc := testcluster.NodeConfig{ID: nd.id, DataDir: nd.dataDir, URL: nd.url, Raft: nd.raft, Candidates: cands,
		TokensFile: nd.tokens, Heartbeat: e2eHeartbeat, Election: e2eElection, LeaderLease: e2eLeaderLease}
	if c.caFile != "" {
		nc.TLS = &testcluster.TLSFiles{CA: c.caFile, Cert: nd.cert, Key: nd.key}
	}
	doc := nc.Doc()
	doc["log"] = map[string]any{"level": "info"}
	// Every test client writes from 127.0.0.1, faster than the default
	// write rate limit allows one address.
	doc["limits"] = map[string]any{"write_rate": 0}
	if edit != nil {
		edit(doc)
	}
	if err := testcluster.WriteConfig(nd.config, doc); err != nil {
		c.t.Fatal(err)
	}
}

// start runs `elanous-node serve --config` for nd.
func (c *e2eCluster) start(nd *e2eNode) {
	c.t.Helper()
	name := nd.id
	if nd.starts > 0 {
		name = fmt.Sprintf("%s-run%d", nd.id, nd.starts+1)
	}
	nd.starts++
	nd.proc = startProc(c.t, nd.dir, name, childEnv(), "serve", "--config", nd.config)
}

// startAll starts every node and waits until each is ready and they agree on
// one known primary, which it returns.
func (c *e2eCluster) startAll() (*e2eNode, wire.Primary) {
	c.t.Helper()
	for _, nd := range c.nodes {
		c.start(nd)
	}
	return c.waitPrimary(nil, 0, 20*time.Second)
}

// node returns the node named id.
func (c *e2eCluster) node(id string) *e2eNode {
	for _, nd := range c.nodes {
		if nd.id == id {
			return nd
		}
	}
	c.t.Fatalf("no node %q in the cluster", id)
	return nil
}

// running returns the nodes whose process runs, except the ones in skip.
func (c *e2eCluster) running(skip ...*e2eNode) []*e2eNode {
	var out []*e2eNode
next:
	for _, nd := range c.nodes {
		if nd.proc == nil || nd.proc.exited() {
			continue
		}
		for _, s := range skip {
			if s == nd {
				continue next
			}
		}
		out = append(out, nd)
	}
	return out
}

// waitPrimary polls GET /v1/primary on every running node except skip until
// all answer known:true with the same holder and a generation above
// minGeneration, and returns that holder and claim.
func (c *e2eCluster) waitPrimary(skip *e2eNode, minGeneration uint64, timeout time.Duration) (*e2eNode, wire.Primary) {
	c.t.Helper()
	var agreed wire.Primary
	testutil.Poll(c.t, fmt.Sprintf("an agreed known primary above generation %d", minGeneration), timeout, func() error {
		var urls []string
		for _, nd := range c.running(skip) {
			urls = append(urls, nd.url)
		}
		var err error
		if agreed, err = testcluster.AgreedPrimary(context.Background(), e2eClient, urls); err != nil {
			return err
		}
		if agreed.Generation <= minGeneration {
			return fmt.Errorf("agreed on %+v", agreed)
		}
		return nil
	})
	return c.node(agreed.Holder), agreed
}

// checkLogs fails the test if any process's output shows a panic or, in a
// -race build, a data race.
func (c *e2eCluster) checkLogs(procs ...*proc) {
	c.t.Helper()
	for _, p := range procs {
		stdout, stderr := p.output()
		for _, out := range []string{stdout, stderr} {
			if strings.Contains(strings.ToLower(out), "panic") {
				c.t.Errorf("%s logged a panic (see %s / %s)", p.name, p.stdout, p.stderr)
			}
			if strings.Contains(out, "DATA RACE") {
				c.t.Errorf("%s reported a data race (see %s)", p.name, p.stderr)
			}
		}
	}
}

// e2eClient sends every request of the end-to-end tests: a new connection
// per request (the tests kill the processes they talk to) and a 3 s bound. It
// trusts the e2e CA, so the helpers work on TLS clusters too.
var e2eClient = func() *http.Client {
	c := testutil.NewClient(3*time.Second, false)
	c.Transport.(*http.Transport).TLSClientConfig = e2eClientTLS()
	return c
}()

// e2eCall is a request of the end-to-end tests: body, when not nil, is sent
// as JSON with token's bearer authorization.
func e2eCall(method, url, token string, body any) testutil.Call {
	c := testutil.JSONCall(method, url, token, body)
	c.Client = e2eClient
	return c
}

// getPrimary fetches GET /v1/primary without a token, as members do.
func getPrimary(base string) (wire.Primary, error) {
	return testcluster.Primary(context.Background(), e2eClient, base)
}

// getStatus fetches GET /v1/cluster/status with the query token.
func (c *e2eCluster) getStatus(nd *e2eNode) (wire.ClusterStatus, error) {
	return testcluster.Status(context.Background(), e2eClient, nd.url, c.tokens.Query)
}

// registerBody is a resource registration as the TypeScript member sends
// it. An id "machine:<name>" is the machine <name> itself (kind machine, its
// machine field <name>, whatever machine says); any other id is an instance
// of machine.
func registerBody(id, machine string) map[string]any {
	kind := "instance"
	if name, ok := strings.CutPrefix(id, "machine:"); ok {
		kind, machine = "machine", name
	}
	return map[string]any{
		"id": id, "kind": kind, "name": machine, "machine": machine, "owner": "",
		"attrs":      map[string]any{"load": 0.5},
		"observedAt": time.Now().UnixMilli(), "ttlMs": 600_000,
	}
}

// acquireBody is a port lease request with a TTL no test outlives.
func acquireBody(machine, purpose string) map[string]any {
	return map[string]any{"machine": machine, "purpose": purpose, "ttlMs": 600_000}
}

// grepTree returns the files under root whose content contains needle.
func grepTree(t *testing.T, root string, needle []byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			hits = append(hits, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("search %s: %v", root, err)
	}
	return hits
}

// checkStatusCommand runs `elanous-node status --candidates` (table and
// --json) with the query token in ELANOUS_TOKEN and checks it shows every
// candidate reachable, one leader, one generation and that leader as primary.
func checkStatusCommand(t *testing.T, urls []string, queryToken string) {
	t.Helper()
	run := func(args ...string) (stdout string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, e2eBinary(t), append([]string{"status"}, args...)...)
		cmd.Env = childEnv("ELANOUS_TOKEN=" + queryToken)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w; stderr: %s", err, stderr.String())
		}
		return string(out), err
	}
	candidates := []string{"--candidates", strings.Join(urls, ",")}
	out, err := run(append(candidates, "--json")...)
	if err != nil {
		t.Fatalf("elanous-node status --json: %v\n%s", err, out)
	}
	var st struct {
		Candidates []struct {
			Machine    string `json:"machine"`
			Reachable  bool   `json:"reachable"`
			State      string `json:"state"`
			Generation uint64 `json:"generation"`
		} `json:"candidates"`
		Primary struct {
			Holder     string `json:"holder"`
			Generation uint64 `json:"generation"`
		} `json:"primary"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("elanous-node status --json output is not the documented JSON: %v\n%s", err, out)
	}
	if len(st.Candidates) != len(urls) {
		t.Errorf("status --json lists %d candidates, want %d\n%s", len(st.Candidates), len(urls), out)
	}
	var leaders []string
	gens := map[uint64]bool{}
	for _, cand := range st.Candidates {
		if !cand.Reachable {
			t.Errorf("status --json: candidate %s unreachable\n%s", cand.Machine, out)
		}
		if cand.State == "Leader" {
			leaders = append(leaders, cand.Machine)
		}
		gens[cand.Generation] = true
	}
	if len(leaders) != 1 || len(gens) != 1 {
		t.Errorf("status --json: leaders %v, generations %v; want one of each\n%s", leaders, gens, out)
	}
	if len(leaders) == 1 && (st.Primary.Holder != leaders[0] || !gens[st.Primary.Generation]) {
		t.Errorf("status --json: primary %+v, want holder %s at the candidates' generation\n%s", st.Primary, leaders[0], out)
	}

	table, err := run(candidates...)
	if err != nil {
		t.Fatalf("elanous-node status: %v\n%s", err, table)
	}
	if n := strings.Count(table, "Leader"); n != 1 {
		t.Errorf("elanous-node status table shows %d leaders, want 1:\n%s", n, table)
	}
	t.Logf("elanous-node status:\n%s", table)
}

// ackedWrites records the writes the cluster acknowledged (a 2xx answer).
