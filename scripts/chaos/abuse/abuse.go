// Package abuse runs the fault suite's abuse scenario against a cluster:
// well-behaved members (machine tokens, holding leases and heartbeating
// records on short TTLs, watching /v1/primary like the member agent) beside
// one abusive machine token and one client with no token, each from its own
// source address. The abusers register without bound, lease every port,
// flood heartbeats on random ids, squat other machines' ids, open thousands
// of blocking queries, send random tokens and random HTTP methods. Run
// returns what everyone got; Report.Violations says what the cluster must
// never have let happen.
package abuse

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Config describes a run.
type Config struct {
	// Targets are the nodes' API URLs.
	Targets []string
	// AdminToken issues the machine tokens of the members and the abuser.
	AdminToken string
	// MemberAddr, AbuserAddr and AnonymousAddr are the local IP addresses the
	// well-behaved members, the abusive member and the client without a
	// token dial from; empty lets the system choose. Each address has its
	// own rate limits and caps on the nodes.
	MemberAddr, AbuserAddr, AnonymousAddr string
	// Members is the number of well-behaved members; default 4.
	Members int
	// MemberTTL is the TTL of their records and leases, MemberEvery how
	// often they heartbeat and renew; defaults 8 s and 1 s (the member agent
	// uses 600 s and 30 s).
	MemberTTL, MemberEvery time.Duration
	// BlockingQueries is how many blocking /v1/primary queries the client
	// without a token opens at once; default 10,000.
	BlockingQueries int
	// AbuseRate bounds the requests per second of the abusive member, and
	// of the token-less client's floods (random tokens, random methods);
	// default 1,000 and 300. The abusers share the test machine's CPUs with
	// the cluster; a real attacker's machine would not.
	AbuseRate, AnonymousRate float64
	// AttrsBytes is the size of the attrs of each abusive registration;
	// default 15 KiB (the limit is 16 KiB).
	AttrsBytes int
	// Quota, when set, is the quotas the run sets first (PUT
	// /v1/cluster/limits, admin; a zero field is the default), so that the
	// abuser reaches them within a short run.
	Quota *wire.Limits
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.Members == 0 {
		c.Members = 4
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = 8 * time.Second
	}
	if c.MemberEvery == 0 {
		c.MemberEvery = time.Second
	}
	if c.BlockingQueries == 0 {
		c.BlockingQueries = 10_000
	}
	if c.AbuseRate == 0 {
		c.AbuseRate = 1000
	}
	if c.AnonymousRate == 0 {
		c.AnonymousRate = 300
	}
	if c.AttrsBytes == 0 {
		c.AttrsBytes = 15 << 10
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Report is what a run saw.
type Report struct {
	// Outcomes counts the answers of each kind of request: kind →
	// "status code" (or "status" for an answer without a JSON error, or
	// "transport" when no answer came) → count.
	Outcomes map[string]map[string]int
	// Granted counts what the abusive member got: distinct resources
	// registered and port leases acquired.
	GrantedResources, GrantedLeases int
	// Quota is the cluster's limits in force when the run started.
	Quota wire.Limits
	// BlockingCap is a node's limit on one address's blocking queries.
	BlockingCap int
	// MaxBlocking is the most blocking queries each node held at once
	// (elanous_blocking_queries, sampled).
	MaxBlocking map[string]int
	// Series is, per node, the request series (elanous_http_requests_total)
	// in its registry at the end.
	Series map[string]int
	// MemberOps and MemberRetries count the members' heartbeats and
	// renewals, and those that needed a retry; MemberSlowest is the slowest
	// that succeeded.
	MemberOps, MemberRetries int
	MemberSlowest            time.Duration
	// Lost lists what a member lost: a record or lease refused, expired or
	// missing at the end, or a member request that was rate limited.
	Lost []string
}

// maxSeries bounds a node's request series: routes × methods × codes of a
// fixed set, whatever the requests.
const maxSeries = 200

// Violations lists what the cluster must never have allowed.
func (r *Report) Violations() []string {
	var out []string
	for _, l := range r.Lost {
		out = append(out, "member lost "+l)
	}
	// Each kind of abusive request has the answers it may get.
	for kind, outcomes := range r.Outcomes {
		allowed, ok := allowedOutcomes[kind]
		if !ok {
			continue
		}
		for outcome, n := range outcomes {
			if !allowed[outcome] {
				out = append(out, fmt.Sprintf("%s answered %q %d times", kind, outcome, n))
			}
		}
	}
	if r.Quota.ResourcesPerMachine > 0 && r.GrantedResources > r.Quota.ResourcesPerMachine {
		out = append(out, fmt.Sprintf("the abuser holds %d resources, past the quota of %d", r.GrantedResources, r.Quota.ResourcesPerMachine))
	}
	if r.Quota.LeasesPerMachine > 0 && r.GrantedLeases > r.Quota.LeasesPerMachine {
		out = append(out, fmt.Sprintf("the abuser got %d leases, past the quota of %d", r.GrantedLeases, r.Quota.LeasesPerMachine))
	}
	for _, must := range []struct{ kind, outcome string }{
		{"abuser register", "429 quota-exceeded"}, {"abuser acquire", "429 quota-exceeded"},
		{"abuser squat register", "403 forbidden"}, {"anonymous blocking query", "429 rate-limited"},
	} {
		if r.Outcomes[must.kind][must.outcome] == 0 {
			out = append(out, fmt.Sprintf("%s never got %s: the limit did not bite", must.kind, must.outcome))
		}
	}
	limited := 0
	for kind, outcomes := range r.Outcomes {
		if strings.HasPrefix(kind, "abuser ") {
			limited += outcomes["429 rate-limited"]
		}
	}
	if limited == 0 {
		out = append(out, "the abusive member never got 429 rate-limited: the write rate limit did not bite")
	}
	for node, n := range r.MaxBlocking {
		// The anonymous client's cap, plus each member's one watch.
		if limit := r.BlockingCap + 16; n > limit {
			out = append(out, fmt.Sprintf("%s held %d blocking queries at once, want at most %d", node, n, limit))
		}
	}
	for node, n := range r.Series {
		if n > maxSeries {
			out = append(out, fmt.Sprintf("%s has %d request series after random methods, want at most %d", node, n, maxSeries))
		}
	}
	sort.Strings(out)
	return out
}

// allowedOutcomes are the answers each kind of abusive request may get.
var allowedOutcomes = map[string]map[string]bool{
	"abuser register":         set("200", "429 quota-exceeded", "429 rate-limited"),
	"abuser acquire":          set("201", "429 quota-exceeded", "429 rate-limited"),
	"abuser acquire other":    set("403 forbidden", "429 rate-limited"),
	"abuser random heartbeat": set("404 not-found", "429 rate-limited"),
	"abuser squat register":   set("403 forbidden", "429 rate-limited"),
	"abuser squat id":         set("400 invalid-request", "403 forbidden", "429 rate-limited"),
	"abuser squat heartbeat":  set("403 forbidden", "429 rate-limited"),
	"abuser squat delete":     set("403 forbidden", "429 rate-limited"),
	"abuser squat release":    set("403 forbidden", "429 rate-limited"),
	// The token-less client's connections share its address's cap
	// (limits.connections_per_address) with its own blocking queries: a
	// new one may be closed at accept.
	"anonymous random token":   set("401 unauthorized", "429 rate-limited", "transport"),
	"anonymous random method":  set("404 not-found", "405 method-not-allowed", "transport"),
	"anonymous blocking query": set("200", "429 rate-limited", "transport", "cancelled"),
}

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// run is one Run's shared state.
type run struct {
	cfg Config

	mu      sync.Mutex
	report  Report          // guarded by mu
	granted map[string]bool // guarded by mu: abuser resources registered
	victims []victim        // guarded by mu: the members' records and leases
}

// victim is a member's machine, one of its resources and one of its leases.
type victim struct {
	machine, resource string
	port              int
}

// Run runs the members and the abusers until ctx ends, then checks that the
// members hold everything they held, and reports. An error means the run
// could not be set up (tokens, the members' first records).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r := newRun(cfg)
	cfg = r.cfg
	admin := newClient(cfg.MemberAddr, 5*time.Second, 0)

	if cfg.Quota != nil {
		if _, err := r.retry(ctx, admin, http.MethodPut, "/v1/cluster/limits", cfg.AdminToken, *cfg.Quota, http.StatusOK); err != nil {
			return nil, fmt.Errorf("set the quotas: %w", err)
		}
	}
	limits, err := r.readLimits(ctx, admin)
	if err != nil {
		return nil, err
	}
	r.report.Quota, r.report.BlockingCap = limits.Effective, 64
	if limits.Node != nil {
		r.report.BlockingCap = limits.Node.BlockingQueriesPerAddress
	}
	abuserToken, err := r.issue(ctx, admin, "abuser")
	if err != nil {
		return nil, err
	}
	members := make([]*goodMember, cfg.Members)
	for i := range members {
		tok, err := r.issue(ctx, admin, fmt.Sprintf("good-%d", i))
		if err != nil {
			return nil, err
		}
		members[i] = &goodMember{r: r, machine: fmt.Sprintf("good-%d", i), token: tok, c: newClient(cfg.MemberAddr, 3*time.Second, 0)}
		if err := members[i].setUp(ctx); err != nil {
			return nil, err
		}
	}
	cfg.Logf("%d members hold %d records and %d leases; the abusers start", len(members), 2*len(members), 2*len(members))

	var wg sync.WaitGroup
	mctx, stopMembers := context.WithCancel(context.WithoutCancel(ctx))
	watchClient := newClient(cfg.MemberAddr, 0, 0) // a watch waits up to 30 s; mctx ends it
	for _, m := range members {
		wg.Go(func() { m.run(mctx) })
		for _, t := range cfg.Targets {
			wg.Go(func() { m.watch(mctx, watchClient, t) })
		}
	}
	var abusers sync.WaitGroup
	abusers.Go(func() { r.abuseWrites(ctx, abuserToken) })
	abusers.Go(func() { r.blockingWave(ctx) })
	abusers.Go(func() { r.anonymousFlood(ctx) })
	abusers.Go(func() { r.sampleBlocking(ctx) })
	abusers.Wait()
	cfg.Logf("abusers stopped; the members check what they hold")

	// The members keep going for two more rounds, then everything they
	// registered and leased must still be there.
	time.Sleep(2 * cfg.MemberEvery)
	stopMembers()
	wg.Wait()
	for _, m := range members {
		m.verify(context.WithoutCancel(ctx))
	}
	r.countSeries(context.WithoutCancel(ctx))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.GrantedResources = len(r.granted)
	return &r.report, nil
}

func newRun(cfg Config) *run {
	cfg.defaults()
	return &run{cfg: cfg, granted: map[string]bool{},
		report: Report{Outcomes: map[string]map[string]int{}, MaxBlocking: map[string]int{}, Series: map[string]int{}}}
}

// newClient is an HTTP client dialing from local (when set). maxConns > 0
// bounds its connections per node.
func newClient(local string, timeout time.Duration, maxConns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 64, MaxConnsPerHost: maxConns,
			IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// answer is one request's outcome.
type answer struct {
	status int
	code   string // the JSON error's code, if any
	body   []byte
	index  string // X-Elanous-Index
	err    error
}

// outcome is the answer's key in Report.Outcomes.
func (a answer) outcome() string {
	switch {
	case a.err != nil && strings.Contains(a.err.Error(), "context canceled"):
		return "cancelled"
	case a.err != nil:
		return "transport"
	case a.code != "":
		return fmt.Sprintf("%d %s", a.status, a.code)
	}
	return strconv.Itoa(a.status)
}

// do sends one request and reads the answer.
func do(ctx context.Context, c *http.Client, method, url, token string, header map[string]string, body any) answer {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	a := answer{status: resp.StatusCode, body: data, index: resp.Header.Get(wire.HeaderIndex), err: err}
	if resp.StatusCode >= 400 {
		var e wire.Error
		if json.Unmarshal(data, &e) == nil {
			a.code = e.Error
		}
	}
	return a
}

func (r *run) count(kind string, a answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.report.Outcomes[kind]
	if m == nil {
		m = map[string]int{}
		r.report.Outcomes[kind] = m
	}
	m[a.outcome()]++
}

func (r *run) target() string { return r.cfg.Targets[mrand.IntN(len(r.cfg.Targets))] }

// retry sends a request until it gets an answer other than a transport
// error or a 503, for up to 20 s (setting up, before any abuse).
func (r *run) retry(ctx context.Context, c *http.Client, method, path, token string, body any, want int) (answer, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := do(ctx, c, method, r.target()+path, token, nil, body)
		if a.err == nil && a.status == want {
			return a, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || (a.err == nil && a.status != http.StatusServiceUnavailable) {
			return a, fmt.Errorf("%s %s: %d %s %w", method, path, a.status, a.body, a.err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *run) readLimits(ctx context.Context, c *http.Client) (wire.LimitsStatus, error) {
	a, err := r.retry(ctx, c, http.MethodGet, "/v1/cluster/limits?consistent=true", r.cfg.AdminToken, nil, http.StatusOK)
	var st wire.LimitsStatus
	if err == nil {
		err = json.Unmarshal(a.body, &st)
	}
	return st, err
}

func (r *run) issue(ctx context.Context, c *http.Client, machine string) (string, error) {
	a, err := r.retry(ctx, c, http.MethodPost, "/v1/tokens/member", r.cfg.AdminToken, wire.IssueTokenRequest{Machine: machine}, http.StatusCreated)
	if err != nil {
		return "", fmt.Errorf("issue a token for %s: %w", machine, err)
	}
	var t wire.IssuedToken
	if err := json.Unmarshal(a.body, &t); err != nil {
		return "", err
	}
	return t.Token, nil
}

// Summary renders the report's figures, one line per kind of request.
func (r *Report) Summary() []string {
	var out []string
	kinds := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		var parts []string
		for o, n := range r.Outcomes[k] {
			parts = append(parts, fmt.Sprintf("%s ×%d", o, n))
		}
		slices.Sort(parts)
		out = append(out, fmt.Sprintf("%s: %s", k, strings.Join(parts, ", ")))
	}
	out = append(out, fmt.Sprintf("abuser granted %d resources (quota %d) and %d leases (quota %d)",
		r.GrantedResources, r.Quota.ResourcesPerMachine, r.GrantedLeases, r.Quota.LeasesPerMachine))
	out = append(out, fmt.Sprintf("members: %d heartbeats and renewals, %d retried, %d lost; the slowest answered in %s",
		r.MemberOps, r.MemberRetries, len(r.Lost), r.MemberSlowest.Round(time.Millisecond)))
	out = append(out, fmt.Sprintf("most blocking queries held at once per node: %v (cap per address %d); request series per node: %v",
		r.MaxBlocking, r.BlockingCap, r.Series))
	return out
}
