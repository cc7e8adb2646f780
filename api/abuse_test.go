package api_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// guardedCluster is a cluster whose nodes run with the given caps, record
// metrics in registries the test reads, and write their audit lines to one
// buffer.
type guardedCluster struct {
	*apitest.Cluster
	reg   registries
	audit *testutil.SyncBuffer
}

// startGuarded starts a guardedCluster; opts.API, if set, runs after the
// guarded cluster's own changes to each node's deps.
func startGuarded(t *testing.T, limits wire.NodeLimits, opts apitest.Options) *guardedCluster {
	t.Helper()
	g := &guardedCluster{audit: &testutil.SyncBuffer{}}
	more := opts.API
	opts.API = func(i int, d *api.Deps) {
		for len(g.reg) <= i {
			g.reg = append(g.reg, nil)
		}
		g.reg[i] = prometheus.NewRegistry()
		d.Registry, d.Limits = g.reg[i], limits
		d.Audit = slog.New(slog.NewJSONHandler(g.audit, nil)).With("node", fmt.Sprintf("node-%c", 'a'+i))
		if more != nil {
			more(i, d)
		}
	}
	if opts.Timeout == 0 {
		opts.Timeout = clusterOptions().Timeout
	}
	g.Cluster = apitest.Start(t, opts)
	return g
}

// waitFormat2 waits until every node applies the format level that brings
// quotas, machine ids and Precheck's token check.
func (g *guardedCluster) waitFormat2(t *testing.T) {
	t.Helper()
	for _, n := range g.Nodes {
		g.WaitFor(n.Machine+" at format 2", 10*time.Second, func() bool { return n.Node.FSM().Format() >= 2 })
	}
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip (127.0.0.2, …): each test address has its own rate
// limit buckets and caps.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{
		Timeout:       20 * time.Second,
		Transport:     &http.Transport{Proxy: nil, DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// from returns call sent from the loopback address ip.
func from(ip string, call testutil.Call) testutil.Call {
	call.Client = clientFrom(ip)
	return call
}

func heartbeatCall(url, token, id string) testutil.Call {
	return testutil.Call{Method: http.MethodPost, URL: url + "/v1/resources/" + id + "/heartbeat", Auth: testutil.Bearer(token)}
}

func registerCall(url, token, machine, id, kind string, ttlMs int64) testutil.Call {
	return testutil.JSONCall(http.MethodPost, url+"/v1/resources/register", token,
		wire.RegisterRequest{ID: id, Kind: kind, Name: machine, Machine: machine, TTLMs: ttlMs})
}

// A heartbeat, delete, renew or release that would fail is answered by the
// leader from its applied state without a log entry, whether it reaches the
// leader directly or through a follower: the leader's commit and last index
// do not move. A call that succeeds adds one.
func TestServer_PrecheckAddsNoLogEntry(t *testing.T) {
	// Hour-long TTLs and sweep interval: no sweep adds an entry meanwhile.
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{Sweep: time.Hour})
	c.waitFormat2(t)
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	mbp := issueToken(t, c.Cluster, leader.URL, "mbp")
	studio := issueToken(t, c.Cluster, leader.URL, "studio")
	gone := issueToken(t, c.Cluster, leader.URL, "gone")
	testutil.WantStatus(t, "revoke gone", testutil.Send(t, testutil.Call{Method: http.MethodDelete,
		URL: leader.URL + "/v1/tokens/member/gone", Auth: testutil.Bearer(c.Tokens.Admin)}), http.StatusNoContent)
	const hour = 3_600_000
	testutil.WantStatus(t, "register", testutil.Send(t, registerCall(leader.URL, mbp.Token, "mbp", "machine:mbp", "machine", hour)), http.StatusOK)
	lease := acquire(t, leader.URL, mbp.Token, wire.AcquireRequest{Machine: "mbp", Purpose: "precheck", TTLMs: hour})
	free := bandStart
	if free == lease.Port {
		free++
	}
	c.WaitApplied()

	tests := []struct {
		name   string
		call   func(url string) testutil.Call
		status int
		code   string
	}{
		{"heartbeat of an unknown id", func(u string) testutil.Call { return heartbeatCall(u, mbp.Token, "machine%3Anope") },
			http.StatusNotFound, wire.CodeNotFound},
		{"delete of an unknown id", func(u string) testutil.Call {
			return testutil.Call{Method: http.MethodDelete, URL: u + "/v1/resources/instance%3Anope%2F1", Auth: testutil.Bearer(c.Tokens.Member)}
		}, http.StatusNotFound, wire.CodeNotFound},
		{"heartbeat of another machine's record", func(u string) testutil.Call { return heartbeatCall(u, studio.Token, "machine%3Ambp") },
			http.StatusForbidden, wire.CodeForbidden},
		{"renew under another lease id", func(u string) testutil.Call {
			return leaseCall(http.MethodPost, u, lease.Port, mbp.Token, "00000000-0000-0000-0000-000000000000")
		}, http.StatusConflict, wire.CodeLeaseMismatch},
		{"release under another lease id", func(u string) testutil.Call {
			return leaseCall(http.MethodDelete, u, lease.Port, mbp.Token, "00000000-0000-0000-0000-000000000000")
		}, http.StatusConflict, wire.CodeLeaseMismatch},
		{"renew of a free port", func(u string) testutil.Call { return leaseCall(http.MethodPost, u, free, mbp.Token, "x") },
			http.StatusNotFound, wire.CodeNotFound},
		{"release by another owner", func(u string) testutil.Call {
			return leaseCall(http.MethodDelete, u, lease.Port, c.Tokens.Member, lease.LeaseID)
		},
			http.StatusForbidden, wire.CodeForbidden},
		{"heartbeat with a revoked token", func(u string) testutil.Call { return heartbeatCall(u, gone.Token, "machine%3Agone") },
			http.StatusUnauthorized, wire.CodeUnauthorized},
	}
	raft := leader.Node.Raft()
	for _, via := range []*apitest.Node{leader, follower} {
		for _, tt := range tests {
			t.Run(tt.name+" via "+via.Machine, func(t *testing.T) {
				commit, last := raft.CommitIndex(), raft.LastIndex()
				r := testutil.Send(t, tt.call(via.URL))
				testutil.WantError(t, tt.name, r, tt.status, tt.code)
				if gotCommit, gotLast := raft.CommitIndex(), raft.LastIndex(); gotCommit != commit || gotLast != last {
					t.Errorf("%s moved the leader's commit index %d → %d (last index %d → %d), want no log entry",
						tt.name, commit, gotCommit, last, gotLast)
				}
			})
		}
	}
	// The measure can fail: a heartbeat that succeeds is an entry.
	commit := raft.CommitIndex()
	testutil.WantStatus(t, "heartbeat of a live record", testutil.Send(t, heartbeatCall(leader.URL, mbp.Token, "machine%3Ambp")), http.StatusOK)
	if raft.CommitIndex() <= commit {
		t.Errorf("a successful heartbeat left the commit index at %d", commit)
	}
}

// Writes are limited per machine token on the node the client talks to; a
// write a follower forwards is not charged again on the leader; writes with
// a valid token are never limited by address; a forwarding header from a
// client's address does not exempt it; authentication failures take from the
// address's bucket.
func TestServer_WriteRateLimits(t *testing.T) {
	// One token every 100 s: nothing refills while the test runs.
	c := startGuarded(t, wire.NodeLimits{WriteRate: 0.01, WriteBurst: 3}, apitest.Options{})
	c.waitFormat2(t)
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	mbp := testutil.Decode[wire.IssuedToken](t, testutil.Expect(t, from("127.0.0.9",
		testutil.JSONCall(http.MethodPost, leader.URL+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: "mbp"})), http.StatusCreated))
	c.WaitApplied()
	const ttl = 600_000
	refused := func(what string, r testutil.Reply) {
		t.Helper()
		testutil.WantError(t, what, r, http.StatusTooManyRequests, wire.CodeRateLimited)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s: Retry-After = %q, want whole seconds ≥ 1", what, r.Header.Get("Retry-After"))
		}
	}

	// Through a follower: charged there, once, to the machine token.
	testutil.Expect(t, from("127.0.0.2", registerCall(follower.URL, mbp.Token, "mbp", "machine:mbp", "machine", ttl)), http.StatusOK)
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		testutil.Expect(t, from(ip, heartbeatCall(follower.URL, mbp.Token, "machine%3Ambp")), http.StatusOK)
	}
	refused("fourth write of mbp through the follower", testutil.Send(t, from("127.0.0.4", heartbeatCall(follower.URL, mbp.Token, "machine%3Ambp"))))
	if got := c.reg.metric(t, fi, "elanous_rate_limited_total", "scope", "token"); got != 1 {
		t.Errorf("follower rate_limited{scope=token} = %v, want 1", got)
	}

	// The leader charged none of them: mbp has its whole burst there.
	for _, ip := range []string{"127.0.0.3", "127.0.0.3", "127.0.0.4"} {
		testutil.Expect(t, from(ip, heartbeatCall(leader.URL, mbp.Token, "machine%3Ambp")), http.StatusOK)
	}
	refused("fourth write of mbp on the leader", testutil.Send(t, from("127.0.0.5", heartbeatCall(leader.URL, mbp.Token, "machine%3Ambp"))))
	if got := c.reg.metric(t, li, "elanous_rate_limited_total", "scope", "token"); got != 1 {
		t.Errorf("leader rate_limited{scope=token} = %v, want 1", got)
	}

	// Authenticated writes are not limited by address: a fleet behind one
	// NAT address with the shared member token writes past any burst.
	for range 10 {
		testutil.Expect(t, from("127.0.0.6", registerCall(leader.URL, c.Tokens.Member, "shared", "machine:shared", "machine", ttl)), http.StatusOK)
	}
	if got := c.reg.metric(t, li, "elanous_rate_limited_total", "scope", "address"); got != 0 {
		t.Errorf("leader rate_limited{scope=address} = %v after authenticated writes, want 0", got)
	}

	// A client that claims to be a forward is charged all the same.
	other := testutil.Decode[wire.IssuedToken](t, testutil.Expect(t, from("127.0.0.9",
		testutil.JSONCall(http.MethodPost, leader.URL+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: "spoof"})), http.StatusCreated))
	c.WaitApplied()
	spoof := func() testutil.Call {
		return from("127.0.0.8", registerCall(leader.URL, other.Token, "spoof", "machine:spoof", "machine", ttl).
			WithHeader(wire.HeaderForwarded, follower.Machine))
	}
	for range 3 {
		testutil.Expect(t, spoof(), http.StatusOK)
	}
	refused("fourth spoofed forward", testutil.Send(t, spoof()))

	// Authentication failures take from the address's bucket too.
	for range 3 {
		r := testutil.Send(t, from("127.0.0.10", testutil.Call{Method: http.MethodGet, URL: leader.URL + "/v1/resources", Auth: testutil.Bearer(testutil.RandomToken())}))
		testutil.WantError(t, "unknown token", r, http.StatusUnauthorized, wire.CodeUnauthorized)
	}
	refused("fourth unknown token", testutil.Send(t, from("127.0.0.10",
		testutil.Call{Method: http.MethodGet, URL: leader.URL + "/v1/resources", Auth: testutil.Bearer(testutil.RandomToken())})))
}

// A follower that has applied every entry it holds answers an unknown token
// 401 after a confirmation round, without forwarding it to the leader.
func TestServer_UnknownTokenOnCaughtUpFollower(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	fi := c.Follower()
	follower := c.Nodes[fi]
	c.WaitFor("the follower caught up", 10*time.Second, func() bool { return !follower.Node.Lagging() })
	before := c.reg.metric(t, fi, "elanous_forwards_total", "result", "ok") + c.reg.metric(t, fi, "elanous_forwards_total", "result", "error")
	for range 50 {
		r := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: follower.URL + "/v1/resources/machine%3Ax/heartbeat", Auth: testutil.Bearer(testutil.RandomToken())})
		testutil.WantError(t, "unknown token on a follower", r, http.StatusUnauthorized, wire.CodeUnauthorized)
	}
	after := c.reg.metric(t, fi, "elanous_forwards_total", "result", "ok") + c.reg.metric(t, fi, "elanous_forwards_total", "result", "error")
	if after != before {
		t.Errorf("the follower forwarded %v unknown tokens to the leader, want none", after-before)
	}
}

// A machine token issued through the leader authenticates at once on a
// follower that has not received the token's entry yet: before it calls a
// token unknown, the follower confirms with the leader and applies up to the
// leader's commit index (read-your-writes for tokens on every node).
func TestServer_FreshTokenOnFollowerBehind(t *testing.T) {
	hold := &heldReplication{}
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{Timeout: 500 * time.Millisecond, Transport: hold.wrap})
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	hold.set(follower.Machine)
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: "fresh"}))
	testutil.WantStatus(t, "issue a token", r, http.StatusCreated)
	token := testutil.Decode[wire.IssuedToken](t, r).Token
	if _, ok := follower.Node.FSM().MachineForToken(sha256.Sum256([]byte(token))); ok {
		t.Fatal("the held-back follower already knows the token: the test holds nothing back")
	}
	time.AfterFunc(50*time.Millisecond, func() { hold.set("") })
	r = testutil.Send(t, registerCall(follower.URL, token, "fresh", "machine:fresh", "machine", 60_000))
	testutil.WantStatus(t, "register with the fresh token on the follower", r, http.StatusOK)
}

// heldReplication wraps raft transports so that appends to one node wait
// until it is released: that node lags behind the entries the leader has
// committed with the other follower.
type heldReplication struct {
	mu   sync.Mutex
	node raft.ServerID
	free *sync.Cond
}

func (h *heldReplication) set(machine string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.free == nil {
		h.free = sync.NewCond(&h.mu)
	}
	h.node = raft.ServerID(machine)
	h.free.Broadcast()
}

func (h *heldReplication) wait(id raft.ServerID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.node != "" && h.node == id {
		h.free.Wait()
	}
}

func (h *heldReplication) wrap(_ int, t raft.Transport) raft.Transport {
	return heldTransport{Transport: t, h: h}
}

type heldTransport struct {
	raft.Transport
	h *heldReplication
}

// AppendEntriesPipeline is unsupported, so every append goes through
// AppendEntries, where it can be held.
func (t heldTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t heldTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.h.wait(id)
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t heldTransport) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// A follower that lags lets the leader judge a well-formed token it does not
// know, and does so at most 10 times a second (bursts of 20; api/ratelimit.go's
// unknownTokenForward*), so a flood of random tokens mostly never reaches
// the leader. The follower is held lagging through Deps.Lagging: a real
// follower lags only for the instant between receiving an entry and applying
// it, too short for a test to hold. A token
// only the leader knows is a cluster token the leader alone has been given
// (a tokens.json reload that reached it first): its answer through the
// follower is the leader's judgement.
func TestServer_UnknownTokenOnLaggingFollower(t *testing.T) {
	const forwardRate, forwardBurst = 10, 20
	var lagging atomic.Bool
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{
		API: func(_ int, d *api.Deps) { d.Lagging = lagging.Load }, // the leader never asks
	})
	li, fi := c.Leader(), c.Follower()
	follower := c.Nodes[fi]
	forwards := func() float64 {
		return c.reg.metric(t, fi, "elanous_forwards_total", "result", "ok") + c.reg.metric(t, fi, "elanous_forwards_total", "result", "error")
	}
	leaderOnly := testutil.RandomToken()
	c.Nodes[li].Server.SetTokens(wire.TokensFile{Admin: c.Tokens.Admin, Member: c.Tokens.Member, Query: leaderOnly})
	list := func(token string) testutil.Call {
		return testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/resources", Auth: testutil.Bearer(token)}
	}

	for _, tt := range []struct {
		lagging      bool
		want         int
		wantForwards float64
	}{
		{lagging: false, want: http.StatusUnauthorized, wantForwards: 0}, // caught up: 401 at once
		{lagging: true, want: http.StatusOK, wantForwards: 1},            // the leader judges
	} {
		lagging.Store(tt.lagging)
		before := forwards()
		r := testutil.Send(t, list(leaderOnly))
		testutil.WantStatus(t, fmt.Sprintf("a token only the leader knows, through a follower lagging %v", tt.lagging), r, tt.want)
		if got := forwards() - before; got != tt.wantForwards {
			t.Errorf("lagging %v: the follower forwarded %v requests, want %v", tt.lagging, got, tt.wantForwards)
		}
	}

	// A flood of unknown tokens: every one is 401, whether the leader or the
	// follower says so, and no more are forwarded than the limiter allows
	// in the time the flood took, which is exact whatever the machine's
	// speed. The flood goes on until one is answered without a forward: the
	// limit bit. It bites after about forwardBurst requests unless each
	// takes over 1/forwardRate s.
	lagging.Store(true)
	before := forwards()
	start := time.Now()
	paced := false
	for n := 1; n <= 1000 && !paced; n++ {
		was := forwards()
		r := testutil.Send(t, list(testutil.RandomToken()))
		testutil.WantError(t, "an unknown token through a lagging follower", r, http.StatusUnauthorized, wire.CodeUnauthorized)
		now := forwards()
		paced = now == was
		if allowed := forwardBurst + forwardRate*time.Since(start).Seconds(); now-before > allowed+1 {
			t.Fatalf("%v of %d unknown tokens forwarded in %v, want at most %.0f", now-before, n, time.Since(start), allowed)
		}
	}
	if !paced {
		t.Errorf("every one of 1000 unknown tokens was forwarded to the leader in %v, want them paced", time.Since(start))
	}
	if got := forwards() - before; got == 0 {
		t.Errorf("no unknown token was forwarded by the lagging follower, want up to %d at once", forwardBurst)
	}
}

// Blocking queries are capped overall and per address; over a cap the answer
// is 429 at once and the connection is closed; a query whose index has
// passed needs no slot; one its client gives up is 499, not a server error.
func TestServer_BlockingQueryCaps(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{BlockingQueries: 3, BlockingQueriesPerAddress: 2}, apitest.Options{})
	fi := c.Follower()
	n := c.Nodes[fi]
	idx := headerUint(t, testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary"}), wire.HeaderIndex)
	blocking := testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/primary?index=%d&wait=30s", n.URL, idx), Auth: testutil.Bearer(c.Tokens.Query)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	hold := func(ip string) {
		wg.Go(func() { _, _ = testutil.DoContext(ctx, from(ip, blocking)) })
	}
	waiting := func(want float64) {
		t.Helper()
		c.WaitFor(fmt.Sprintf("%v blocking queries", want), 10*time.Second, func() bool {
			return c.reg.metric(t, fi, "elanous_blocking_queries") == want
		})
	}
	hold("127.0.0.2")
	hold("127.0.0.2")
	waiting(2)
	r := testutil.Send(t, from("127.0.0.2", blocking))
	testutil.WantError(t, "a third blocking query from one address", r, http.StatusTooManyRequests, wire.CodeRateLimited)
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("refused blocking query headers = %v, want Retry-After", r.Header)
	}
	// The refusal closes the connection: reading a keep-alive HTTP/1.1
	// answer to the end returns only because the server closed it.
	conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/primary?index=%d&wait=30s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", idx, c.Tokens.Query)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	raw, err := io.ReadAll(conn)
	if err != nil || !strings.HasPrefix(string(raw), "HTTP/1.1 429") {
		t.Errorf("raw refused blocking query = %q, %v; want a 429 and the connection closed", raw, err)
	}
	hold("127.0.0.3")
	waiting(3)
	r = testutil.Send(t, from("127.0.0.4", blocking))
	testutil.WantError(t, "a blocking query over the node's cap", r, http.StatusTooManyRequests, wire.CodeRateLimited)
	passed := blocking
	passed.URL = n.URL + "/v1/primary?index=0&wait=30s"
	testutil.Expect(t, from("127.0.0.4", passed), http.StatusOK)
	if got := c.reg.metric(t, fi, "elanous_blocking_queries_refused_total"); got != 3 {
		t.Errorf("blocking_queries_refused_total = %v, want 3", got)
	}
	cancel()
	waiting(0)
	// The three the clients gave up are 499, not server errors.
	c.WaitFor("the abandoned queries counted", 10*time.Second, func() bool {
		return c.reg.metric(t, fi, "elanous_http_requests_total", "route", "/v1/primary", "code", "499") == 3
	})
	if got := c.reg.metric(t, fi, "elanous_http_requests_total", "route", "/v1/primary", "code", "500"); got != 0 {
		t.Errorf("abandoned blocking queries counted %v times as 500", got)
	}
}

// A /v1/primary blocking query without a valid token waits at most
// Limits.AnonymousWaitMs; with one it waits what it asked.
func TestServer_AnonymousPrimaryWait(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{AnonymousWaitMs: 300}, apitest.Options{})
	n := c.Nodes[c.Follower()]
	idx := headerUint(t, testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary"}), wire.HeaderIndex)
	for _, auth := range []string{"", testutil.Bearer(testutil.RandomToken()), "Bearer garbage"} {
		// Without the cap this would wait 5 minutes and the client's 20 s would run out.
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/primary?index=%d&wait=5m", n.URL, idx), Auth: auth})
		testutil.WantStatus(t, "anonymous blocking /v1/primary", r, http.StatusOK)
		if got := headerUint(t, r, wire.HeaderIndex); got != idx {
			t.Fatalf("anonymous blocking query answered index %d, want the unchanged %d", got, idx)
		}
	}
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/primary?index=%d&wait=1500ms", n.URL, idx), Auth: testutil.Bearer(c.Tokens.Query)})
	testutil.WantStatus(t, "authenticated blocking /v1/primary", r, http.StatusOK)
	if r.Elapsed < 1500*time.Millisecond && headerUint(t, r, wire.HeaderIndex) == idx {
		t.Errorf("an authenticated blocking query answered after %v, want its whole 1.5 s wait", r.Elapsed)
	}
}

// Random methods and paths do not grow the metrics registry: routes and
// methods outside the fixed sets are labelled "other".
func TestServer_MetricLabelsAreFixed(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	n := c.Nodes[0]
	for i := range 60 {
		method := fmt.Sprintf("M%04X", i*7919)
		path := fmt.Sprintf("/random/%d", i)
		r := testutil.Send(t, testutil.Call{Method: method, URL: n.URL + path})
		testutil.WantStatus(t, method+" "+path, r, http.StatusNotFound)
		r = testutil.Send(t, testutil.Call{Method: method, URL: n.URL + "/v1/primary"})
		testutil.WantStatus(t, method+" /v1/primary", r, http.StatusMethodNotAllowed)
	}
	families, err := c.reg[0].Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true, "other": true}
	series := 0
	for _, f := range families {
		if f.GetName() != "elanous_http_requests_total" && f.GetName() != "elanous_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			series++
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "method":
					if !methods[lp.GetValue()] {
						t.Errorf("%s has method label %q, want one of the fixed set", f.GetName(), lp.GetValue())
					}
				case "route":
					if v := lp.GetValue(); v != "other" && !strings.HasPrefix(v, "/v1/") && v != "/metrics" {
						t.Errorf("%s has route label %q", f.GetName(), v)
					}
				}
			}
		}
	}
	if c.reg.metric(t, 0, "elanous_http_requests_total", "route", "other", "method", "other", "code", "404") != 60 {
		t.Errorf(`requests_total{route="other",method="other",code="404"} = %v, want 60`,
			c.reg.metric(t, 0, "elanous_http_requests_total", "route", "other", "method", "other", "code", "404"))
	}
	if series > 12 {
		t.Errorf("%d request series after 120 requests of random methods and paths, want a handful", series)
	}
}

// Every admin action and every authentication failure is one audit line,
// written where it is decided (once, on the leader, for a forwarded write),
// naming the client's address and the token's fingerprint, never a token.
func TestServer_AuditLog(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	c.waitFormat2(t)
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	admin := func(call testutil.Call, want int) testutil.Reply {
		t.Helper()
		return testutil.Expect(t, from("127.0.0.2", call), want)
	}
	issued := testutil.Decode[wire.IssuedToken](t, admin(testutil.JSONCall(http.MethodPost, follower.URL+"/v1/tokens/member", c.Tokens.Admin,
		wire.IssueTokenRequest{Machine: "mbp"}), http.StatusCreated))
	lease := acquire(t, leader.URL, c.Tokens.Member, wire.AcquireRequest{Machine: "mbp", Purpose: "audit", TTLMs: memberTTL})
	admin(leaseCall(http.MethodDelete, follower.URL, lease.Port, c.Tokens.Admin, lease.LeaseID), http.StatusNoContent)
	own := acquire(t, leader.URL, c.Tokens.Member, wire.AcquireRequest{Machine: "mbp", Purpose: "audit", TTLMs: memberTTL})
	testutil.Expect(t, leaseCall(http.MethodDelete, leader.URL, own.Port, c.Tokens.Member, own.LeaseID), http.StatusNoContent)
	admin(testutil.Call{Method: http.MethodDelete, URL: leader.URL + "/v1/tokens/member/mbp", Auth: testutil.Bearer(c.Tokens.Admin)}, http.StatusNoContent)
	admin(testutil.JSONCall(http.MethodPut, follower.URL+"/v1/cluster/limits", c.Tokens.Admin, wire.Limits{ResourcesPerMachine: 7}), http.StatusOK)
	unknown := testutil.RandomToken()
	testutil.Expect(t, from("127.0.0.3", testutil.Call{Method: http.MethodGet, URL: leader.URL + "/v1/resources", Auth: testutil.Bearer(unknown)}), http.StatusUnauthorized)
	const malformed = "Bearer not-a-token-SECRET"
	testutil.Expect(t, from("127.0.0.3", testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/resources", Auth: malformed}), http.StatusUnauthorized)
	testutil.Expect(t, from("127.0.0.3", testutil.JSONCall(http.MethodPost, follower.URL+"/v1/tokens/member", c.Tokens.Query,
		wire.IssueTokenRequest{Machine: "x"})), http.StatusForbidden)

	text := c.audit.String()
	for _, secret := range []string{c.Tokens.Admin, c.Tokens.Member, c.Tokens.Query, issued.Token, unknown, "not-a-token-SECRET", lease.LeaseID} {
		if strings.Contains(text, secret) {
			t.Errorf("the audit log holds a secret %q:\n%s", secret, text)
		}
	}
	want := []struct {
		action, outcome, node, token, remote string
		status                               float64
		extra                                map[string]any
	}{
		{"token.issue", "ok", leader.Machine, fingerprint(c.Tokens.Admin), "127.0.0.2", 201, map[string]any{"machine": "mbp", "via": follower.Machine}},
		{"lease.release", "ok", leader.Machine, fingerprint(c.Tokens.Admin), "127.0.0.2", 204, map[string]any{"port": float64(lease.Port)}},
		{"token.revoke", "ok", leader.Machine, fingerprint(c.Tokens.Admin), "127.0.0.2", 204, map[string]any{"machine": "mbp"}},
		{"limits.set", "ok", leader.Machine, fingerprint(c.Tokens.Admin), "127.0.0.2", 200, map[string]any{"resources_per_machine": float64(7)}},
		{"auth", wire.CodeUnauthorized, leader.Machine, fingerprint(unknown), "127.0.0.3", 401, nil},
		{"auth", wire.CodeUnauthorized, follower.Machine, "", "127.0.0.3", 401, nil},
		{"auth", wire.CodeForbidden, follower.Machine, fingerprint(c.Tokens.Query), "127.0.0.3", 403, nil},
	}
	lines := c.audit.JSONLines(t)
	if len(lines) != len(want) {
		t.Errorf("audit log has %d lines, want %d (one per action; the member's own release is not one):\n%s", len(lines), len(want), text)
	}
	for _, w := range want {
		found := 0
		for _, l := range lines {
			if l["action"] != w.action || l["outcome"] != w.outcome || l["node"] != w.node || l["token"] != w.token || l["status"] != w.status ||
				l["audit"] != true || !strings.HasPrefix(fmt.Sprint(l["remote"]), w.remote+":") {
				continue
			}
			ok := true
			for k, v := range w.extra {
				ok = ok && l[k] == v
			}
			if ok {
				found++
			}
		}
		if found != 1 {
			t.Errorf("audit lines for %s %s on %s from %s: %d, want 1:\n%s", w.action, w.outcome, w.node, w.remote, found, text)
		}
	}
}

// The quotas are visible on every node and in the cluster status, an admin
// changes them through the log, and the change bites.
func TestServer_ClusterLimits(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	c.waitFormat2(t)
	fi := c.Follower()
	follower := c.Nodes[fi]
	get := func(n *apitest.Node) wire.LimitsStatus {
		t.Helper()
		return testutil.Decode[wire.LimitsStatus](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet,
			URL: n.URL + "/v1/cluster/limits?consistent=true", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))
	}
	defaults := wire.Limits{ResourcesPerMachine: 1024, LeasesPerMachine: (bandEnd - bandStart + 1) / 4, Resources: 250_000, IdempotencyKeys: 100_000}
	for _, n := range c.Nodes {
		got := get(n)
		if got.Set != (wire.Limits{}) || got.Effective != defaults || !got.Enforced || got.Node == nil || got.Node.BlockingQueriesPerAddress != 64 {
			t.Errorf("GET /v1/cluster/limits on %s = %+v (node %+v), want the defaults %+v, enforced", n.Machine, got, got.Node, defaults)
		}
	}
	put := func(token, body string) testutil.Reply {
		return testutil.Send(t, testutil.Call{Method: http.MethodPut, URL: follower.URL + "/v1/cluster/limits", Auth: testutil.Bearer(token),
			Body: body, ContentType: "application/json"})
	}
	r := put(c.Tokens.Admin, `{"resourcesPerMachine": 1}`)
	testutil.WantStatus(t, "PUT limits", r, http.StatusOK)
	want := defaults
	want.ResourcesPerMachine = 1
	if got := testutil.Decode[wire.LimitsStatus](t, r); got.Set != (wire.Limits{ResourcesPerMachine: 1}) || got.Effective != want {
		t.Errorf("PUT limits answered %+v, want set {1 0 0 0} and effective %+v", got, want)
	}
	for _, n := range c.Nodes {
		if got := get(n); got.Effective != want {
			t.Errorf("GET limits on %s after PUT = %+v, want %+v", n.Machine, got.Effective, want)
		}
		c.WaitFor(n.Machine+" applied the limits", 5*time.Second, func() bool { return n.Node.FSM().Limits().ResourcesPerMachine == 1 })
		st := testutil.Decode[wire.ClusterStatus](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/cluster/status",
			Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))
		if st.Limits == nil || st.Limits.Set.ResourcesPerMachine != 1 {
			t.Errorf("cluster status of %s has limits %+v, want resourcesPerMachine 1", n.Machine, st.Limits)
		}
	}
	testutil.Expect(t, registerCall(follower.URL, c.Tokens.Member, "q", "machine:q", "machine", memberTTL), http.StatusOK)
	r = testutil.Send(t, registerCall(follower.URL, c.Tokens.Member, "q", "instance:q/1", "instance", memberTTL))
	testutil.WantError(t, "a second resource of q", r, http.StatusTooManyRequests, wire.CodeQuotaExceeded)

	for _, bad := range []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"member token", c.Tokens.Member, `{}`, http.StatusForbidden, wire.CodeForbidden},
		{"negative", c.Tokens.Admin, `{"resources": -1}`, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"unknown field", c.Tokens.Admin, `{"resourcez": 1}`, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"no body", c.Tokens.Admin, ``, http.StatusBadRequest, wire.CodeInvalidRequest},
	} {
		testutil.WantError(t, "PUT limits, "+bad.name, put(bad.token, bad.body), bad.status, bad.code)
	}
	testutil.WantStatus(t, "PUT limits back to the defaults", put(c.Tokens.Admin, `{}`), http.StatusOK)
	if got := get(follower); got.Effective != defaults {
		t.Errorf("limits after PUT {} = %+v, want the defaults", got.Effective)
	}
}
