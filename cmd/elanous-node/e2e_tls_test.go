package main

// End-to-end tests of TLS on real `elanous-node serve` processes: HTTPS and
// mutual TLS Raft through a leader SIGKILL, the client commands with
// --ca-file, a client with the wrong CA that sends nothing, and SIGHUP
// reloading certificates, tokens and the log level without a leader change.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// e2eCA is the CA of every TLS test cluster; httpClient trusts it.
var e2eCA = func() certs.Pair {
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		panic(err)
	}
	return ca
}()

// e2eClientTLS trusts e2eCA.
func e2eClientTLS() *tls.Config {
	pool, err := certs.ParseCAs(e2eCA.Cert)
	if err != nil {
		panic(err)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// writeE2ECA writes the CA certificate to dir/ca.pem.
func writeE2ECA(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, e2eCA.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// issueE2ECert writes a new certificate of e2eCA for machine (and
// 127.0.0.1) to dir/tls/<machine>.pem and -key.pem, replacing the files
// atomically, and returns their paths.
func issueE2ECert(t *testing.T, dir, machine string) (cert, key string) {
	t.Helper()
	pair, err := certs.NewCert(e2eCA, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(tlsDir, machine+".pem"), filepath.Join(tlsDir, machine+"-key.pem")
	if err := writeFileMode(key, pair.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeFileMode(cert, pair.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// cliURLs returns the nodes' URLs as machine=URL pairs for --candidates.
func (c *e2eCluster) cliCandidates() string {
	var parts []string
	for _, nd := range c.nodes {
		parts = append(parts, nd.id+"="+nd.url)
	}
	return strings.Join(parts, ",")
}

// runCLIProc runs one elanous-node client command to completion.
func runCLIProc(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2eBinary(t), args...)
	cmd.Env = env
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	return string(out), errb.String(), err
}

// metricSum adds the samples of the metric name on nd whose labels contain
// every one of with and none of without.
func metricSum(nd *e2eNode, name string, with []string, without []string) (float64, error) {
	r, err := testutil.Do(e2eCall(http.MethodGet, nd.url+"/metrics", "", nil))
	if err != nil {
		return 0, err
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, w := range with {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		for _, w := range without {
			if strings.Contains(line, w) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// apiRequests is the number of API requests each node served, /metrics
// scrapes left out.
func (c *e2eCluster) apiRequests(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, nd := range c.running() {
		// /metrics is this test's own scrape, and /v1/health, which takes no
		// token, is what the leader's membership and format probes ask.
		n, err := metricSum(nd, "elanous_http_requests_total", nil, []string{`route="/metrics"`, `route="/v1/health"`})
		if err != nil {
			t.Fatalf("metrics of %s: %v", nd.id, err)
		}
		out[nd.id] = n
	}
	return out
}

// forwarded is the number of forwards nd made to the leader that the leader answered.
func forwarded(t *testing.T, nd *e2eNode) float64 {
	t.Helper()
	n, err := metricSum(nd, "elanous_forwards_total", []string{`result="ok"`}, nil)
	if err != nil {
		t.Fatalf("metrics of %s: %v", nd.id, err)
	}
	return n
}

// getLease reads one lease through nd.
func (c *e2eCluster) getLease(nd *e2eNode, port int) (wire.PortLease, error) {
	var l wire.PortLease
	r, err := testutil.Do(e2eCall(http.MethodGet, fmt.Sprintf("%s/v1/leases/port/%d", nd.url, port), c.tokens.Query, nil))
	if err != nil {
		return l, err
	}
	if r.Status != http.StatusOK {
		return l, fmt.Errorf("GET lease %d = %v", port, r)
	}
	return l, json.Unmarshal(r.Body, &l)
}

// getResource reads one resource through nd.
func (c *e2eCluster) getResource(nd *e2eNode, id string) (wire.Resource, error) {
	var res wire.Resource
	r, err := testutil.Do(e2eCall(http.MethodGet, nd.url+"/v1/resources/"+member.EscapeID(id), c.tokens.Query, nil))
	if err != nil {
		return res, err
	}
	if r.Status != http.StatusOK {
		return res, fmt.Errorf("GET %s = %v", id, r)
	}
	return res, json.Unmarshal(r.Body, &res)
}

// TestE2E_TLS runs a TLS cluster of three serve processes: writes through
// followers are forwarded over verified TLS, status, lease acquire --hold and
// member run work with --ca-file, a leader SIGKILL fails over as without TLS
// with the lease and the member kept, and clients given the wrong CA refuse
// without a single request reaching any node.
func TestE2E_TLS(t *testing.T) {
	e2eBinary(t)
	c := buildE2ECluster(t, 3, true)
	leader, before := c.startAll()
	t.Logf("leader %s, generation %d", leader.id, before.Generation)
	for _, nd := range c.nodes {
		if !strings.HasPrefix(nd.url, "https://") {
			t.Fatalf("%s URL %s, want https", nd.id, nd.url)
		}
	}

	// Writes through every node: the followers forward to the leader.
	acked := newAckedWrites()
	for _, nd := range c.nodes {
		c.register(acked, nd, "machine:host-"+nd.id) // a machine resource's id names its machine
		c.acquire(acked, nd, "tls")
	}
	for _, nd := range c.running(leader) {
		if n := forwarded(t, nd); n < 2 {
			t.Errorf("follower %s forwarded %v writes to the leader over TLS, want 2", nd.id, n)
		}
	}

	// status with --ca-file.
	out, stderr, err := runCLIProc(t, childEnv("ELANOUS_TOKEN="+c.tokens.Query), "status", "--candidates", c.cliCandidates(), "--ca-file", c.caFile)
	if err != nil || strings.Count(out, "Leader") != 1 || !strings.Contains(out, "primary: "+leader.id) {
		t.Fatalf("status --ca-file = %v\n%s\n%s", err, out, stderr)
	}
	t.Logf("elanous-node status --ca-file:\n%s", out)

	// lease acquire --hold and member run, with --ca-file.
	dir := t.TempDir()
	hold := startProc(t, dir, "lease-hold", childEnv("ELANOUS_TOKEN="+c.tokens.Member), "lease", "acquire", "--machine", "mbp",
		"--purpose", "tls-hold", "--ttl", "6s", "--renew-interval", "500ms", "--hold", "--json",
		"--candidates", c.cliCandidates(), "--ca-file", c.caFile)
	memberProc := startProc(t, dir, "member-run", childEnv("ELANOUS_TOKEN="+c.tokens.Member), "member", "run", "--machine", "mbp",
		"--endpoint", "http://127.0.0.1:31414", "--interval", "500ms", "--candidates", c.cliCandidates(), "--ca-file", c.caFile)
	var held wire.PortLease
	testutil.Poll(t, "lease acquire --hold prints its lease", 15*time.Second, func() error {
		stdout, _ := hold.output()
		if !strings.HasSuffix(stdout, "\n") {
			return fmt.Errorf("no lease line yet (exited %v)", hold.exited())
		}
		return json.Unmarshal([]byte(stdout), &held)
	})
	// The holder renews once before it says it holds the port; a leader
	// killed before that renewal would fail it (that first renewal is fatal
	// by design), so wait for the line.
	testutil.Poll(t, "lease acquire --hold holding its port", 15*time.Second, func() error {
		if _, stderr := hold.output(); !strings.Contains(stderr, fmt.Sprintf("holding port %d", held.Port)) {
			return fmt.Errorf("not holding yet (exited %v)", hold.exited())
		}
		return nil
	})
	testutil.Poll(t, "member run registers machine:mbp", 15*time.Second, func() error {
		_, err := c.getResource(leader, "machine:mbp")
		return err
	})

	// SIGKILL the leader.
	survivors, _, after := c.killLeader(leader, before.Generation, "TLS failover")
	newLeader := c.node(after.Holder)
	var follower *e2eNode
	for _, nd := range survivors {
		if nd != newLeader {
			follower = nd
		}
	}
	fwd := forwarded(t, follower)
	c.register(acked, follower, "machine:host-"+follower.id)
	c.acquire(acked, follower, "tls-after")
	if n := forwarded(t, follower); n < fwd+2 {
		t.Errorf("after the failover follower %s forwarded %v writes, want %v", follower.id, n-fwd, 2)
	}
	for _, nd := range survivors {
		c.checkAcked(acked, nd, 5*time.Second)
	}

	// The held lease and the member's machine are renewed through the new leader.
	afterKill := time.Now().UnixMilli()
	testutil.Poll(t, "the held lease renewed after the failover", 10*time.Second, func() error {
		l, err := c.getLease(follower, held.Port)
		if err != nil {
			return err
		}
		if l.LeaseID != held.LeaseID || l.RenewedAt <= afterKill || l.Generation != held.Generation {
			return fmt.Errorf("lease %+v, want lease id %s renewed after %d", l, held.LeaseID, afterKill)
		}
		return nil
	})
	testutil.Poll(t, "machine:mbp renewed after the failover", 10*time.Second, func() error {
		r, err := c.getResource(follower, "machine:mbp")
		if err != nil {
			return err
		}
		if r.RenewedAt <= afterKill {
			return fmt.Errorf("renewedAt %d, want after %d", r.RenewedAt, afterKill)
		}
		return nil
	})
	hold.signal(t, syscall.SIGINT)
	if code, err := hold.wait(10 * time.Second); err != nil || code != 0 {
		t.Errorf("lease acquire --hold after SIGINT: exit %d, %v", code, err)
	}
	if _, stderr := hold.output(); !strings.Contains(stderr, fmt.Sprintf("released port %d", held.Port)) {
		t.Errorf("lease acquire --hold did not release port %d:\n%s", held.Port, stderr)
	}
	memberProc.signal(t, syscall.SIGTERM)
	if code, err := memberProc.wait(10 * time.Second); err != nil || code != 0 {
		t.Errorf("member run after SIGTERM: exit %d, %v", code, err)
	}

	// The wrong CA: every client refuses, and no request reaches a node.
	other, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := filepath.Join(dir, "wrong-ca.pem")
	if err := os.WriteFile(wrongCA, other.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "mbp.token")
	if err := os.WriteFile(tokenFile, []byte(c.tokens.Member), 0o600); err != nil {
		t.Fatal(err)
	}
	requestsBefore := c.apiRequests(t)
	env := childEnv("ELANOUS_TOKEN=" + c.tokens.Admin)
	for _, args := range [][]string{
		{"status"}, {"token", "list"}, {"lease", "list"}, {"resources", "list"},
		{"lease", "acquire", "--machine", "mbp", "--purpose", "wrong-ca"},
		{"bench", "--duration", "1s", "--concurrency", "1"},
		{"join", "--url", follower.url, "--token-file", tokenFile, "--machine", "mbp", "--data-dir", filepath.Join(dir, "joined")},
	} {
		full := append(args, "--ca-file", wrongCA)
		if args[0] != "join" {
			urls := c.cliCandidates()
			if args[0] == "bench" {
				urls = strings.Join([]string{survivors[0].url, survivors[1].url}, ",")
			}
			full = append(full, "--candidates", urls)
		}
		if out, stderr, err := runCLIProc(t, env, full...); err == nil {
			t.Errorf("%v with the wrong CA exited 0:\n%s\n%s", args, out, stderr)
		} else {
			t.Logf("%v with the wrong CA: %v: %s", args, err, lastLine(stderr))
		}
	}
	requestsAfter := c.apiRequests(t)
	for id, n := range requestsAfter {
		if n != requestsBefore[id] {
			t.Errorf("%s served %v API requests while clients had the wrong CA, want none", id, n-requestsBefore[id])
		}
	}
	handshakeErrors := 0
	for _, nd := range survivors {
		_, stderr := nd.proc.output()
		handshakeErrors += strings.Count(stderr, "TLS handshake error")
	}
	if handshakeErrors == 0 {
		t.Error("no node logged a refused TLS handshake from the clients with the wrong CA")
	}
	if _, err := os.Stat(filepath.Join(dir, "joined", "control", "join.json")); err == nil {
		t.Error("join with the wrong CA wrote a join file")
	}
	var procs []*proc
	for _, nd := range survivors {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// servedSerial opens a new TLS connection to addr (an API or a Raft port;
// no client certificate) and returns the serial number of the certificate
// the server presented.
func servedSerial(addr string) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, e2eClientTLS())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// TestE2E_TLSReloadOnSIGHUP rotates certificates, cluster tokens and the log
// level with SIGHUP: new connections present the new certificate, the
// generation and the leader stay the same, and the leader keeps running.
func TestE2E_TLSReloadOnSIGHUP(t *testing.T) {
	e2eBinary(t)
	c := buildE2ECluster(t, 3, true)
	leader, before := c.startAll()
	follower := c.running(leader)[0]
	statusBefore, err := c.getStatus(leader)
	if err != nil {
		t.Fatal(err)
	}
	host := func(nd *e2eNode) string { return strings.SplitN(nd.url, "://", 2)[1] }

	// Certificates: a follower, then the leader.
	for _, nd := range []*e2eNode{follower, leader} {
		old, err := servedSerial(host(nd))
		if err != nil {
			t.Fatalf("TLS to %s: %v", nd.id, err)
		}
		if raftOld, err := servedSerial(nd.raft); err != nil || raftOld != old {
			t.Fatalf("%s Raft port serial %s, %v; want the API's %s", nd.id, raftOld, err, old)
		}
		issueE2ECert(t, nd.dir, nd.id)
		pair, err := tls.LoadX509KeyPair(nd.cert, nd.key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		want := leaf.SerialNumber.Text(16)
		nd.proc.signal(t, syscall.SIGHUP)
		testutil.Poll(t, nd.id+" presents the new certificate on new connections", 5*time.Second, func() error {
			api, err := servedSerial(host(nd))
			if err != nil {
				return err
			}
			rft, err := servedSerial(nd.raft)
			if err != nil {
				return err
			}
			if api != want || rft != want {
				return fmt.Errorf("API serial %s, Raft serial %s; want %s (old %s)", api, rft, want, old)
			}
			return nil
		})
		if nd.proc.exited() {
			t.Fatalf("%s exited after SIGHUP", nd.id)
		}
	}
	// A broken rotation (a certificate for another machine) is refused; the
	// node keeps the certificate in use.
	inUse, _ := servedSerial(host(follower))
	wrongCert, wrongKey := issueE2ECert(t, t.TempDir(), "node-x")
	for _, f := range [][2]string{{wrongCert, follower.cert}, {wrongKey, follower.key}} {
		data, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFileMode(f[1], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	follower.proc.signal(t, syscall.SIGHUP)
	testutil.Poll(t, follower.id+" refuses the certificate for another machine", 5*time.Second, func() error {
		if _, stderr := follower.proc.output(); !strings.Contains(stderr, "certificates not reloaded") {
			return fmt.Errorf("no refusal logged yet")
		}
		return nil
	})
	if got, err := servedSerial(host(follower)); err != nil || got != inUse {
		t.Errorf("after a refused reload %s presents %s, %v; want the certificate in use %s", follower.id, got, err, inUse)
	}
	issueE2ECert(t, follower.dir, follower.id) // a valid one again, for the restarts of the cleanup

	// Writes still work through every node (new Raft and forwarding
	// connections use the new certificates).
	acked := newAckedWrites()
	for _, nd := range c.nodes {
		c.register(acked, nd, "machine:host-"+nd.id)
	}

	// Cluster tokens: a new tokens.json on every node, SIGHUP; the old admin
	// token stops working and the new one works.
	fresh, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if err := writeTokensFile(nd.tokens, fresh); err != nil {
			t.Fatal(err)
		}
		nd.proc.signal(t, syscall.SIGHUP)
	}
	// Every node first: a follower that lags asks the leader about a token
	// it does not know, and the leader may not have reloaded yet.
	for _, nd := range c.nodes {
		testutil.Poll(t, nd.id+" accepts the new admin token", 5*time.Second, func() error {
			_, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/tokens/member", fresh.Admin, nil), http.StatusOK)
			return err
		})
	}
	for _, nd := range c.nodes {
		if _, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/tokens/member", c.tokens.Admin, nil), http.StatusUnauthorized); err != nil {
			t.Errorf("old admin token after the reload: %v", err)
		}
	}
	c.tokens = fresh

	// Log level: debug in the follower's config, SIGHUP, and a debug line appears.
	debugLines := func() int {
		_, stderr := follower.proc.output()
		return strings.Count(stderr, `msg="request error"`)
	}
	_, _ = testutil.Do(e2eCall(http.MethodGet, follower.url+"/v1/leases/port", "", nil)) // a 401
	if n := debugLines(); n != 0 {
		t.Fatalf("%d debug lines at log level info", n)
	}
	c.writeConfig(follower, func(doc map[string]any) { doc["log"] = map[string]any{"level": "debug"} })
	follower.proc.signal(t, syscall.SIGHUP)
	testutil.Poll(t, follower.id+" logs at debug after SIGHUP", 5*time.Second, func() error {
		_, _ = testutil.Do(e2eCall(http.MethodGet, follower.url+"/v1/leases/port", "", nil))
		if debugLines() == 0 {
			return fmt.Errorf("no debug line yet")
		}
		return nil
	})

	// No restart, no leader change: same leader, same generation and term.
	for _, nd := range c.nodes {
		if nd.proc.exited() {
			t.Errorf("%s exited", nd.id)
		}
		p, err := getPrimary(nd.url)
		if err != nil || p.Holder != leader.id || p.Generation != before.Generation {
			t.Errorf("%s: primary %+v, %v; want %s at generation %d as before the reloads", nd.id, p, err, leader.id, before.Generation)
		}
	}
	statusAfter, err := c.getStatus(leader)
	if err != nil {
		t.Fatal(err)
	}
	if statusAfter.State != "Leader" || statusAfter.Term != statusBefore.Term || statusAfter.Generation != statusBefore.Generation {
		t.Errorf("leader %s after the reloads: %s term %d generation %d; want Leader, term %d, generation %d",
			leader.id, statusAfter.State, statusAfter.Term, statusAfter.Generation, statusBefore.Term, statusBefore.Generation)
	}
	_, stderr := leader.proc.output()
	if n := strings.Count(stderr, "candidate started"); n != 1 || strings.Contains(stderr, "candidate stopped") {
		t.Errorf("the leader started %d times or stopped; want one start and no stop", n)
	}
	if n := strings.Count(stderr, "reload: certificates reloaded"); n != 2 {
		t.Errorf("the leader logged %d certificate reloads, want 2 (its rotation, the tokens' SIGHUP)", n)
	}
	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}
