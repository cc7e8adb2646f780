package main

// End-to-end tests (ARCHITECTURE.md, "How it is tested", layer 5): real elanous-node processes on
// loopback. They are skipped with -short; ./scripts/test runs them.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// maxFailover is the product requirement: after the leader dies, the
// survivors serve a higher generation within 2 s.
const maxFailover = 2 * time.Second

// devPorts are the fixed loopback ports of `elanous-node dev` (README, "The two commands").
var devPorts = []int{31412, 31413, 31422, 31423, 31432, 31433}

func TestE2E_Dev(t *testing.T) {
	e2eBinary(t)
	for _, port := range devPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d is busy (%v): TestE2E_Dev needs the fixed dev ports %v free; "+
				"is an `elanous-node dev` already running?", port, err, devPorts)
		}
		ln.Close()
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	start := time.Now()
	p := startProc(t, dir, "dev", childEnv(), "dev", "--data-dir", dataDir)
	urls := []string{"http://127.0.0.1:31413", "http://127.0.0.1:31423", "http://127.0.0.1:31433"}

	// Three candidates serving, the tokens printed and a known primary, all
	// within 5 s of the start.
	var stdout string
	testutil.Poll(t, "dev cluster serving", 5*time.Second-time.Since(start), func() error {
		if p.exited() {
			return fmt.Errorf("dev exited early: %v", p.Err())
		}
		stdout, _ = p.output()
		if !strings.Contains(stdout, "ready;") {
			return errors.New(`stdout has no "ready;" line yet`)
		}
		for _, u := range urls {
			if _, err := testutil.DoExpect(e2eCall(http.MethodGet, u+"/v1/health", "", nil), http.StatusOK); err != nil {
				return err
			}
		}
		pr, err := getPrimary(urls[0])
		if err != nil {
			return err
		}
		if !pr.Known {
			return fmt.Errorf("GET /v1/primary on %s = %+v, want known:true", urls[0], pr)
		}
		return nil
	})
	t.Logf("dev cluster serving after %s", time.Since(start).Round(time.Millisecond))

	printed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(admin|member|query)\s+([0-9a-f]{64})\s*$`).FindAllStringSubmatch(stdout, -1) {
		printed[m[1]] = m[2]
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "control", "tokens.json"))
	if err != nil {
		t.Fatalf("dev did not write its tokens file: %v", err)
	}
	var tokens wire.TokensFile
	if err := json.Unmarshal(raw, &tokens); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"admin": tokens.Admin, "member": tokens.Member, "query": tokens.Query}
	for scope, tok := range want {
		if printed[scope] != tok {
			t.Errorf("dev printed %s token %q, want the one in its tokens file", scope, printed[scope])
		}
	}

	// Every candidate's own view: one leader, one generation.
	c := &e2eCluster{t: t, tokens: tokens}
	testutil.Poll(t, "one leader and one generation in /v1/cluster/status", 5*time.Second, func() error {
		leaders, gens := map[string]bool{}, map[uint64]bool{}
		for i, u := range urls {
			st, err := c.getStatus(&e2eNode{id: devNames[i], url: u})
			if err != nil {
				return err
			}
			if st.State == "Leader" {
				leaders[st.Machine] = true
			}
			leaders[st.Leader] = true
			gens[st.Generation] = true
		}
		delete(leaders, "")
		if len(leaders) != 1 || len(gens) != 1 {
			return fmt.Errorf("leaders %v, generations %v", leaders, gens)
		}
		return nil
	})

	// elanous-node status, with the query token from the environment.
	checkStatusCommand(t, urls, tokens.Query)

	p.signal(t, syscall.SIGTERM)
	code, err := p.wait(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("dev exit code after SIGTERM = %d, want 0", code)
	}
	c.checkLogs(p)
}

// TestE2E_DevTLS runs `dev --tls` on free ports and a data dir of its own
// (so it neither needs the fixed dev ports nor touches a developer's dev
// data): the CA it writes in <data dir>/tls is the one clients need. status
// with it (--ca-file) sees the three candidates and one leader; status
// without it refuses the candidates' certificates.
func TestE2E_DevTLS(t *testing.T) {
	e2eBinary(t)
	base := freeDevBasePort(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	p := startProc(t, dir, "dev-tls", childEnv(), "dev", "--tls", "--data-dir", dataDir, "--http-port", strconv.Itoa(base))
	var urls []string
	for i := range devNames {
		urls = append(urls, fmt.Sprintf("https://127.0.0.1:%d", base+10*i))
	}
	var stdout string
	testutil.Poll(t, "dev --tls ready", time.Minute, func() error {
		if p.exited() {
			return fmt.Errorf("dev --tls exited early: %v", p.Err())
		}
		if stdout, _ = p.output(); !strings.Contains(stdout, "ready;") {
			return errors.New(`stdout has no "ready;" line yet`)
		}
		return nil
	})
	ca := filepath.Join(dataDir, "tls", caCertName)
	if !strings.Contains(stdout, "TLS: CA "+ca+" ") {
		t.Errorf("dev --tls does not name its CA %s:\n%s", ca, stdout)
	}
	for _, u := range urls {
		if !strings.Contains(stdout, u) {
			t.Errorf("dev --tls does not list %s:\n%s", u, stdout)
		}
	}
	tokens, err := readTokensFile(filepath.Join(dataDir, "control", "tokens.json"))
	if err != nil {
		t.Fatalf("dev --tls tokens file: %v", err)
	}
	env := childEnv("ELANOUS_TOKEN=" + tokens.Query)
	candidates := strings.Join(urls, ",")

	out, stderr, err := runCLIProc(t, env, "status", "--candidates", candidates, "--ca-file", ca)
	if err != nil || strings.Count(out, "Leader") != 1 {
		t.Errorf("status --ca-file %s = %v, want one leader:\n%s\n%s", ca, err, out, stderr)
	}
	for _, name := range devNames {
		if !strings.Contains(out, name) {
			t.Errorf("status --ca-file does not show %s:\n%s", name, out)
		}
	}
	// Without the CA the candidates' certificates are unknown: status refuses.
	out, stderr, err = runCLIProc(t, env, "status", "--candidates", candidates)
	if err == nil {
		t.Errorf("status without the CA exited 0, want a refusal:\n%s\n%s", out, stderr)
	} else if !strings.Contains(out+stderr, "certificate signed by unknown authority") {
		t.Errorf("status without the CA = %v, want the certificates refused as of an unknown authority:\n%s\n%s", err, out, stderr)
	} else {
		t.Logf("status without the CA: %v: %s", err, lastLine(out+stderr))
	}

	p.signal(t, syscall.SIGTERM) // by its pid
	code, err := p.wait(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("dev --tls exit code after SIGTERM = %d, want 0", code)
	}
	(&e2eCluster{t: t}).checkLogs(p)
}

// freeDevBasePort returns an HTTP port for `dev --http-port` whose six ports
// (node-a's port, +10 and +20, and the Raft port one below each) were all
// free a moment ago; the same small race as freePorts.
func freeDevBasePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		base := freePorts(t, 1)[0]
		if base < 2 || base+20 > 65535 {
			continue
		}
		var lns []net.Listener
		free := true
		for i := range devNames {
			for _, port := range []int{base - 1 + 10*i, base + 10*i} {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					free = false
					continue
				}
				lns = append(lns, ln)
			}
		}
		for _, ln := range lns {
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free set of dev ports found in 20 tries")
	return 0
}

func TestE2E_LeaderKill(t *testing.T) {
	c, leader, before := startE2ECluster(t)
	t.Logf("leader %s, generation %d", leader.id, before.Generation)
	acked := newAckedWrites()

	// Writes through every node, the leader included.
	var leases []wire.PortLease
	for i, nd := range c.nodes {
		c.register(acked, nd, fmt.Sprintf("machine:before-%d", i))
		c.register(acked, nd, fmt.Sprintf("instance:host-%s/%d", nd.id, i)) // an id with "/" travels as %2F
		leases = append(leases, c.acquire(acked, nd, "before"))
	}

	// Keep writing through all three nodes while the leader dies.
	w := c.startWriter(acked, "during")
	testutil.Poll(t, "background writes acknowledged", 5*time.Second, func() error {
		if acked.count() < 3*len(c.nodes)+10 {
			return errors.New("too few yet")
		}
		return nil
	})

	killed := leader
	survivors, failover, after := c.killLeader(killed, before.Generation, "failover")
	if failover > maxFailover*3/4 {
		for _, nd := range survivors {
			logElection(t, nd.proc)
		}
	}
	if after.Holder == killed.id {
		t.Fatalf("new primary is the killed node %s", killed.id)
	}
	// raft.fast_failover (on by default): each survivor saw the leader's
	// connections drop and its Raft port refuse, and stood in its turn
	// rather than waiting for its heartbeat timeout.
	for _, nd := range survivors {
		if _, stderr := nd.proc.output(); !strings.Contains(stderr, "hurrying the election") {
			t.Errorf("survivor %s did not hurry the election after the leader's SIGKILL (fast failover)", nd.id)
			logElection(t, nd.proc)
		}
	}

	// The survivors accept writes; the resources and leases written before
	// the kill renew (under their lease ids) through either of them.
	for i, nd := range survivors {
		c.register(acked, nd, fmt.Sprintf("machine:down-%d", i))
		c.acquire(acked, nd, "while-down")
		for j, o := range c.nodes {
			id := fmt.Sprintf("instance:host-%s/%d", o.id, j)
			testutil.Expect(t,
				e2eCall(http.MethodPost, nd.url+"/v1/resources/"+member.EscapeID(id)+"/heartbeat", c.tokens.Member, map[string]any{"attrs": map[string]any{"load": 0.25}}),
				http.StatusOK)
		}
		for _, l := range leases {
			testutil.Expect(t,
				e2eCall(http.MethodPost, fmt.Sprintf("%s/v1/leases/port/%d/heartbeat", nd.url, l.Port), c.tokens.Member, nil).WithHeader(wire.HeaderPortLeaseID, l.LeaseID),
				http.StatusOK)
		}
	}
	w.halt()
	t.Logf("background writer: %d attempts, %d unacknowledged: %v; slowest failed answers %v", w.attempts, w.failures, w.outcomes, w.slowest)
	// A survivor refuses a write it cannot commit with a 503 that says why,
	// within 1 s (the HTTP contract), never a hang, a 500 or a transport error.
	for kind := range w.outcomes {
		node, outcome, _ := strings.Cut(kind, ": ")
		if node == killed.id {
			continue
		}
		switch outcome {
		case "503 " + wire.CodeNoLeader, "503 " + wire.CodeNotReady, "503 " + wire.CodeOutcomeUnknown:
		default:
			t.Errorf("during failover a write through survivor %s failed with %q, want a 503 no-leader, not-ready or outcome-unknown", node, outcome)
		}
	}
	for _, nd := range survivors {
		if d := w.slowest[nd.id]; d > time.Second {
			t.Errorf("during failover survivor %s took %s to refuse a write, want at most 1s", nd.id, d)
		}
		c.checkAcked(acked, nd, 5*time.Second)
	}

	// The killed node comes back with the same config as a follower and
	// catches up on everything written while it was down.
	c.start(killed)
	testutil.Poll(t, killed.id+" rejoins as a follower", 15*time.Second, func() error {
		st, err := c.getStatus(killed)
		if err != nil {
			return err
		}
		if st.State != "Follower" || st.Leader != after.Holder || st.Generation != after.Generation {
			return fmt.Errorf("state %s, leader %q, generation %d; want Follower of %s at generation %d",
				st.State, st.Leader, st.Generation, after.Holder, after.Generation)
		}
		return nil
	})
	c.checkAcked(acked, killed, 10*time.Second)
	newLeader := c.node(after.Holder)
	testutil.Poll(t, killed.id+" state hash equal to the leader's", 15*time.Second, func() error {
		ls, err := c.getStatus(newLeader)
		if err != nil {
			return err
		}
		fs, err := c.getStatus(killed)
		if err != nil {
			return err
		}
		if ls.AppliedIndex != fs.AppliedIndex {
			return fmt.Errorf("applied index %d on %s, %d on the leader", fs.AppliedIndex, killed.id, ls.AppliedIndex)
		}
		if ls.StateHash != fs.StateHash {
			t.Errorf("at applied index %d the state hash is %s on %s and %s on the leader %s",
				ls.AppliedIndex, fs.StateHash, killed.id, ls.StateHash, newLeader.id)
		}
		return nil
	})
	if p, err := getPrimary(killed.url); err != nil || !p.Known || p.Generation != after.Generation || p.Holder != after.Holder {
		t.Errorf("GET /v1/primary on the restarted %s = %+v, %v; want known %s at generation %d", killed.id, p, err, after.Holder, after.Generation)
	}

	// elanous-node status sees the healed cluster: one leader, one generation.
	var urls []string
	for _, nd := range c.nodes {
		urls = append(urls, nd.url)
	}
	checkStatusCommand(t, urls, c.tokens.Query)

	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	// The killed process's own output too (startProc keeps per-run files).
	procs = append(procs, &proc{name: killed.id, stdout: filepath.Join(killed.dir, killed.id+".stdout"), stderr: filepath.Join(killed.dir, killed.id+".stderr")})
	c.checkLogs(procs...)
}

func TestE2E_SigtermHandsOver(t *testing.T) {
	c, leader, before := startE2ECluster(t)
	acked := newAckedWrites()
	c.register(acked, leader, "machine:before-sigterm")

	termAt := time.Now()
	leader.proc.signal(t, syscall.SIGTERM)
	took, after := waitFailover(t, c.running(leader), before.Generation, termAt, 10*time.Second)
	t.Logf("handover: %s from SIGTERM of %s to the survivors serving generation %d (election timeout %s)",
		took.Round(time.Millisecond), leader.id, after.Generation, e2eElection)
	if after.Holder == leader.id {
		t.Errorf("after SIGTERM the primary is still %s", leader.id)
	}
	code, err := leader.proc.wait(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("%s exit code after SIGTERM = %d, want 0", leader.id, code)
	}
	for _, nd := range c.running(leader) {
		c.register(acked, nd, "machine:after-sigterm-"+nd.id)
	}
	for _, nd := range c.running(leader) {
		c.checkAcked(acked, nd, 5*time.Second)
	}
	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}

func TestE2E_TokensNeverOnDisk(t *testing.T) {
	c, leader, _ := startE2ECluster(t)
	follower := c.running(leader)[0]

	// Issued through a follower, which forwards to the leader.
	issued := testutil.Decode[wire.IssuedToken](t, testutil.Expect(t,
		e2eCall(http.MethodPost, follower.url+"/v1/tokens/member", c.tokens.Admin, map[string]any{"machine": "box-1"}),
		http.StatusCreated))
	if issued.Machine != "box-1" || !wire.ValidToken(issued.Token) {
		t.Fatalf("POST /v1/tokens/member = %+v, want machine box-1 and a 64-hex token", issued)
	}
	for _, tok := range []string{c.tokens.Admin, c.tokens.Member, c.tokens.Query} {
		if issued.Token == tok {
			t.Fatal("the issued machine token equals a cluster token")
		}
	}

	// Used through every node once each has applied it (a follower that has
	// not yet applied the issue answers 401; see the report), for its own
	// machine only.
	testutil.Poll(t, "every node has applied the issued token", 5*time.Second, func() error {
		for _, nd := range c.nodes {
			st, err := c.getStatus(nd)
			if err != nil {
				return err
			}
			if st.Counts.Tokens != 1 {
				return fmt.Errorf("%s counts %+v", nd.id, st.Counts)
			}
		}
		return nil
	})
	for i, nd := range c.nodes {
		testutil.Expect(t,
			e2eCall(http.MethodPost, nd.url+"/v1/resources/register", issued.Token, registerBody(fmt.Sprintf("instance:box-1/%d", i), "box-1")),
			http.StatusOK)
		testutil.Expect(t,
			e2eCall(http.MethodPost, nd.url+"/v1/resources/register", issued.Token, registerBody(fmt.Sprintf("instance:box-2/%d", i), "box-2")),
			http.StatusForbidden)
	}
	l := testutil.Decode[wire.PortLease](t, testutil.Expect(t,
		e2eCall(http.MethodPost, leader.url+"/v1/leases/port", issued.Token, acquireBody("box-1", "tokens-test")),
		http.StatusCreated))
	testutil.Expect(t,
		e2eCall(http.MethodPost, fmt.Sprintf("%s/v1/leases/port/%d/heartbeat", follower.url, l.Port), issued.Token, nil).WithHeader(wire.HeaderPortLeaseID, l.LeaseID),
		http.StatusOK)

	// Every node applied it all; then search every node's directory (data,
	// config, tokens file and captured logs) for the token.
	testutil.Poll(t, "every node has the token and the writes", 5*time.Second, func() error {
		for _, nd := range c.nodes {
			st, err := c.getStatus(nd)
			if err != nil {
				return err
			}
			if st.Counts.Tokens != 1 || st.Counts.Resources != 3 || st.Counts.Leases != 1 {
				return fmt.Errorf("%s counts %+v", nd.id, st.Counts)
			}
		}
		return nil
	})
	sum := sha256.Sum256([]byte(issued.Token))
	tokenHash := hex.EncodeToString(sum[:])
	for _, nd := range c.nodes {
		if hits := grepTree(t, nd.dir, []byte(issued.Token)); len(hits) > 0 {
			t.Errorf("the issued token is stored on disk in %v", hits)
		}
		// The search can see the state: the token's SHA-256 is in the Raft log.
		if hits := grepTree(t, nd.dataDir, []byte(tokenHash)); len(hits) == 0 {
			t.Errorf("the token's SHA-256 is nowhere under %s: the search does not see the stored state", nd.dataDir)
		}
		info, err := os.Stat(nd.tokens)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s tokens file mode = %04o, want 0600", nd.id, perm)
		}
	}

	// Revoked: every node answers the token with 401.
	testutil.Expect(t, e2eCall(http.MethodDelete, follower.url+"/v1/tokens/member/box-1", c.tokens.Admin, nil), http.StatusNoContent)
	for _, nd := range c.nodes {
		testutil.Poll(t, "revoked token refused by "+nd.id, 5*time.Second, func() error {
			_, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/leases/port", issued.Token, nil), http.StatusUnauthorized)
			return err
		})
	}
	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)

	// A tokens file open to group or others keeps serve from starting.
	t.Run("OpenTokensFile", func(t *testing.T) {
		one := newE2ECluster(t, 1)
		nd := one.nodes[0]
		if err := os.Chmod(nd.tokens, 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := runServe(t, nd.config)
		if code == 0 {
			t.Fatalf("serve with a 0644 tokens file exited 0:\n%s", out)
		}
		if !strings.Contains(out, "chmod") || !strings.Contains(out, nd.tokens) {
			t.Errorf("serve with a 0644 tokens file says %q, want the file's path and a chmod hint", out)
		}
		if hits := grepTree(t, nd.dir, []byte(one.tokens.Admin)); len(hits) != 1 || hits[0] != nd.tokens {
			t.Errorf("the admin token is in %v, want only the tokens file", hits)
		}
	})
}

func TestE2E_ConfigErrors(t *testing.T) {
	e2eBinary(t)
	c := newE2ECluster(t, 3)
	nd := c.nodes[0]
	candidate := func(doc map[string]any, i int) map[string]any {
		return doc["cluster"].(map[string]any)["candidates"].([]map[string]any)[i]
	}
	tests := []struct {
		name string
		edit func(doc map[string]any)
		want []string // substrings of the output: the key and the offending value
	}{
		{
			name: "own id not among candidates",
			edit: func(doc map[string]any) { doc["node"].(map[string]any)["id"] = "node-9" },
			want: []string{"node.id", `"node-9"`, "cluster.candidates"},
		},
		{
			name: "duplicate candidate",
			edit: func(doc map[string]any) { candidate(doc, 1)["machine"] = "node-1" },
			want: []string{"cluster.candidates[1].machine", "duplicate", "node-1"},
		},
		{
			name: "candidate url not http",
			edit: func(doc map[string]any) { candidate(doc, 2)["url"] = "ftp://127.0.0.1:31433" },
			want: []string{"cluster.candidates[2].url", "ftp://127.0.0.1:31433"},
		},
		{
			name: "candidate url with a path",
			edit: func(doc map[string]any) { candidate(doc, 2)["url"] = candidate(doc, 2)["url"].(string) + "/api" },
			want: []string{"cluster.candidates[2].url", "/api"},
		},
		{
			name: "advertise not a url",
			edit: func(doc map[string]any) { doc["http"].(map[string]any)["advertise"] = "not a url" },
			want: []string{"http.advertise", "not a url"},
		},
		{
			name: "leader lease above heartbeat",
			edit: func(doc map[string]any) { doc["raft"].(map[string]any)["leader_lease_timeout"] = "2s" },
			want: []string{"raft.leader_lease_timeout", "raft.heartbeat_timeout"},
		},
		{
			name: "plaintext on every interface",
			edit: func(doc map[string]any) {
				doc["http"].(map[string]any)["addr"] = "0.0.0.0:" + strings.Split(nd.url, ":")[2]
				doc["raft"].(map[string]any)["addr"] = "0.0.0.0:" + strings.Split(nd.raft, ":")[1]
			},
			want: []string{"http.addr", "raft.addr", `"0.0.0.0:`, "TLS is off", "tls.ca_file", "tls.allow_plaintext: true"},
		},
		{
			name: "unknown key",
			edit: func(doc map[string]any) { doc["raft"].(map[string]any)["electon_timeout"] = "1s" },
			want: []string{"raft.electon_timeout", "unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.writeConfig(nd, tt.edit)
			out, code := runServe(t, nd.config)
			if code == 0 {
				t.Fatalf("serve exited 0 with a bad config (%s):\n%s", tt.name, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("serve output %q does not mention %q", out, w)
				}
			}
			if strings.Contains(strings.ToLower(out), "panic") {
				t.Errorf("serve panicked on a bad config:\n%s", out)
			}
		})
	}
	t.Run("missing config file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.yaml")
		out, code := runServe(t, missing)
		if code == 0 || !strings.Contains(out, missing) {
			t.Errorf("serve --config %s = exit %d, %q; want non-zero and the path", missing, code, out)
		}
	})
	// No bad config left anything behind: the node never started.
	if entries, err := os.ReadDir(filepath.Join(nd.dataDir, "raft")); err == nil && len(entries) > 0 {
		t.Errorf("a refused config still created Raft state in %s", nd.dataDir)
	}
}
