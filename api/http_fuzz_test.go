package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// Placeholders a FuzzHTTP input may hold: its path gets the port of the
// fixture lease for {port}, its x-port-lease-id header that lease's id for
// {lease}.
const (
	fuzzPort  = "{port}"
	fuzzLease = "{lease}"
)

// The credentials a FuzzHTTP input picks with its auth byte (modulo their
// number).
const (
	authNone      = iota
	authAdmin     // the cluster's admin token
	authMember    // the cluster's member token
	authQuery     // the cluster's query token
	authFixture   // the machine token of machine "fixture"
	authOther     // the machine token of machine "other"
	authRaw       // the fuzzed string is the whole Authorization header
	authBearerRaw // "Bearer " and the fuzzed string
	authChoices
)

// fixtureTTL is the TTL of every fixture record, and keepTTL what a record
// must have left to stay between two inputs: no fixture expires during a
// fuzzing run, so no Sweep changes the state while a request is checked.
const (
	fixtureTTL = wire.MaxResourceTTLMs
	keepTTL    = 2 * 3600 * 1000
)

// fixtureResources are the resources every input starts with: id → kind,
// machine.
var fixtureResources = map[string][2]string{
	"machine:fixture":    {"machine", "fixture"},
	"instance:fixture/1": {"instance", "fixture"},
	"machine:other":      {"machine", "other"},
}

// fuzzCluster is the three-node cluster FuzzHTTP sends its inputs to, and
// the fixtures every input starts from: the resources above, a lease of
// machine "fixture" held with the member token, and machine tokens for
// "fixture" and "other".
type fuzzCluster struct {
	c       *apitest.Cluster
	owner   string            // the member token's fingerprint: the fixtures' owner
	secrets map[string]string // machine → its token
	lease   fsm.PortLease     // the fixture lease
	limits  fsm.Limits        // the limits the cluster started with
	client  *http.Client
}

// FuzzHTTP sends fuzzed requests — method, path (with percent-encoded ids),
// body, Authorization (valid and invalid tokens of every kind),
// x-port-lease-id, Idempotency-Key, Content-Type and one more header, to the
// leader or a follower — through the real echo stack of a real three-node
// cluster (TCP, boltdb). It is seeded with a valid request to every route of
// the route table, and bad variants of each. For every input:
//
//   - the server answers (no dropped connection, which a panic would cause)
//     within the route's budget, except a blocking query or an event
//     stream, which may wait;
//   - no 5xx, except a 503 no-leader, not-ready or outcome-unknown that
//     does not repeat when the request is sent up to three times more once
//     the cluster is ready: those are a loaded machine's missed budgets,
//     which the client retries, not answers to the input;
//   - every error is {"error", "message"} JSON (testutil.CheckError);
//   - a 4xx changes no table of the leader's state: resources, leases,
//     tokens, candidates, limits, primary, format and the change index of
//     every table. The cluster time is left out: a 4xx that Apply returned
//     (a heartbeat for a missing id, a lease id that does not match) is a
//     replicated no-op, which moves the time like every entry does
//     (ARCHITECTURE.md, "Commands"); whether it should reach the log at all
//     is the leader-side rejection's test, not this one. A leadership change
//     during the request (a claim rebases every TTL) skips the comparison;
//   - every node then applies the same log to the same state hash.
//
// Before each input the fixtures are restored through Propose, and anything
// an earlier input created is removed (a server it added included), so the
// state stays small and nothing expires while an input is checked. The
// cluster runs without write rate limits (every input comes from one
// address). Two kinds of input are never sent: the loop guard header
// (X-Elanous-Forwarded-By, see validHeader) and a membership change naming
// one of the cluster's own servers (see build).
func FuzzHTTP(f *testing.F) {
	fc := startFuzzCluster(f)
	addHTTPSeeds(f)
	f.Fuzz(func(t *testing.T, method, path string, body []byte, auth uint8, rawAuth, contentType, leaseID, idemKey, header, value string, follower, chunked bool) {
		fc.check(t, fuzzRequest{method, path, body, auth, rawAuth, contentType, leaseID, idemKey, header, value, follower, chunked})
	})
}

// fuzzRequest is one FuzzHTTP input.
type fuzzRequest struct {
	method, path         string
	body                 []byte
	auth                 uint8
	rawAuth, contentType string
	leaseID, idemKey     string
	header, value        string
	follower, chunked    bool
}

// addHTTPSeeds seeds FuzzHTTP: a valid request to every route of the route
// table, through the leader and a follower, with each credential; then bad
// variants of every kind.
func addHTTPSeeds(f *testing.F) {
	add := func(r fuzzRequest) {
		f.Add(r.method, r.path, r.body, r.auth, r.rawAuth, r.contentType, r.leaseID, r.idemKey, r.header, r.value, r.follower, r.chunked)
	}
	reg := func(id, kind, machine string) []byte {
		return []byte(mustJSON(map[string]any{"id": id, "name": machine, "kind": kind, "machine": machine, "owner": "",
			"attrs": map[string]any{"load": 1}, "observedAt": 1, "ttlMs": memberTTL}))
	}
	bodies := map[string][][]byte{
		"POST /v1/resources/register": {reg("machine:fixture", "machine", "fixture"), reg("instance:fixture/2", "instance", "fixture"),
			reg("machine:other", "machine", "fixture"), reg("machine:new", "machine", "new")},
		"POST /v1/resources/:id/heartbeat": {nil, []byte(`{}`), []byte(`{"attrs":{"load":2}}`)},
		"POST /v1/leases/port": {[]byte(mustJSON(acquireBody(nil))), []byte(`{"machine":"fixture","purpose":"fuzz","ttlMs":1000,"excluded":[31450,31451]}`),
			[]byte(`{"machine":"other","purpose":"fuzz","ttlMs":600000,"owner":""}`)},
		"POST /v1/tokens/member": {[]byte(`{"machine":"fixture"}`), []byte(`{"machine":"newmachine"}`)},
		"PUT /v1/cluster/limits": {[]byte(`{"resourcesPerMachine":2,"leasesPerMachine":1,"resources":3,"idempotencyKeys":1}`), []byte(`{}`), []byte(`{"resources":-1}`)},
		"POST /v1/cluster/peers": {[]byte(`{"machine":"node-z","url":"http://127.0.0.1:9","raft":"127.0.0.1:9","nonvoter":true}`),
			[]byte(`{"machine":"node-y","url":"https://[::1]:1/","raft":"localhost:0"}`)},
		"POST /v1/cluster/leader/transfer": {[]byte(`{}`), []byte(`{"to":"nobody"}`), nil},
		"PUT /v1/snapshot":                 {[]byte("{\"version\":2}\n"), nil},
	}
	params := map[string][]string{
		":id":      {"machine%3Afixture", "instance%3Afixture%2F1", "machine:other", "machine%3Amissing", "%E2%82%AC%00", "%zz"},
		":port":    {fuzzPort, "31499", "0", "-1", "99999999999"},
		":machine": {"fixture", "other", "missing", "__proto__", "m%C3%A4c"},
	}
	for _, rt := range api.RouteTableForTest() {
		method, pattern := rt[0], rt[1]
		paths := []string{pattern}
		for name, values := range params {
			var next []string
			for _, p := range paths {
				if !strings.Contains(p, name) {
					next = append(next, p)
					continue
				}
				for _, v := range values {
					next = append(next, strings.Replace(p, name, v, 1))
				}
			}
			paths = next
		}
		key := method + " " + pattern
		bs := bodies[key]
		if len(bs) == 0 {
			bs = [][]byte{nil}
		}
		for i, p := range paths {
			b := bs[i%len(bs)]
			ct := ""
			if b != nil {
				ct = "application/json"
			}
			// Every credential on the route's first path, three on the
			// others; through the leader and a follower in turn.
			auths := []uint8{authMember, authFixture, authOther}
			if i == 0 {
				auths = []uint8{authNone, authAdmin, authMember, authQuery, authFixture, authOther}
			}
			for j, auth := range auths {
				add(fuzzRequest{method: method, path: p, body: b, auth: auth, contentType: ct, leaseID: fuzzLease, follower: (i+j)%2 == 1})
			}
		}
		for _, b := range bs[1:] {
			add(fuzzRequest{method: method, path: paths[0], body: b, auth: authMember, contentType: "application/json", leaseID: fuzzLease, idemKey: "k1"})
		}
	}
	wrongToken := strings.Repeat("c", 64) // well-formed, known to no one
	for _, r := range []fuzzRequest{
		{method: "GET", path: "/v1/resources?index=1&wait=50ms&kind=machine&machine=fixture", auth: authQuery},
		{method: "GET", path: "/v1/leases/port?consistent=true", auth: authFixture, follower: true},
		{method: "GET", path: "/v1/primary?index=18446744073709551615&wait=1", auth: authNone},
		{method: "GET", path: "/v1/resources?index=-1&wait=6m", auth: authQuery},
		{method: "GET", path: "/v1/cluster/status?consistent=maybe", auth: authAdmin, follower: true},
		{method: "POST", path: "/v1/resources/register", body: []byte(`{"id":"machine:fixture"}{}`), auth: authFixture, contentType: "text/plain"},
		{method: "POST", path: "/v1/resources/register", body: bytes.Repeat([]byte(" "), wire.MaxBodyBytes+1), auth: authMember, chunked: true},
		{method: "POST", path: "/v1/resources/machine%3Afixture/heartbeat", body: []byte(`{"attrs":{"x":` + strings.Repeat("[", 10000) + `}}`), auth: authFixture},
		{method: "POST", path: "/v1/leases/port/" + fuzzPort + "/heartbeat", auth: authMember, leaseID: "not-the-lease", follower: true},
		{method: "DELETE", path: "/v1/leases/port/" + fuzzPort, auth: authOther, leaseID: fuzzLease},
		{method: "DELETE", path: "/v1/leases/port/" + fuzzPort, auth: authAdmin, leaseID: strings.Repeat("l", 129)},
		{method: "POST", path: "/v1/leases/port", body: []byte(mustJSON(acquireBody(nil))), auth: authMember, idemKey: "idem-1", contentType: "application/json; charset=utf-8"},
		{method: "DELETE", path: "/v1/tokens/member/fixture", auth: authMember},
		{method: "POST", path: "/v1/tokens/member", body: []byte(`{"machine":"fixture"}`), auth: authRaw, rawAuth: "Basic YWRtaW46YWRtaW4="},
		{method: "GET", path: "/v1/tokens/member", auth: authBearerRaw, rawAuth: wrongToken, follower: true},
		{method: "GET", path: "/v1/tokens/member", auth: authBearerRaw, rawAuth: strings.ToUpper(wrongToken)},
		{method: "GET", path: "/v1/tokens/member", auth: authRaw, rawAuth: "bearer  " + wrongToken},
		{method: "POST", path: "/v1/resources/register", body: []byte(`{}`), auth: authMember, header: wire.HeaderIdempotencyKey, value: "k"},
		{method: "PATCH", path: "/v1/resources/machine%3Afixture", auth: authMember},
		{method: "BREW", path: "/v1/primary", auth: authNone},
		{method: "HEAD", path: "/v1/resources/machine%3Afixture", auth: authQuery},
		{method: "OPTIONS", path: "/v1/leases/port", auth: authNone},
		{method: "GET", path: "//v1/../v1/primary/", auth: authNone},
		{method: "GET", path: "/v1/resources/%2e%2e%2fprimary", auth: authQuery},
		{method: "GET", path: "/metrics", auth: authNone, header: "Accept", value: "application/openmetrics-text"},
		{method: "GET", path: "/nope", auth: authNone},
	} {
		add(r)
	}
}

// startFuzzCluster starts the cluster and its fixtures. Sweeps run only at
// a due expiry (every fixture lives a day), so nothing but the inputs and
// the fixture upkeep writes to the log.
func startFuzzCluster(f *testing.F) *fuzzCluster {
	opts := clusterOptions()
	opts.Timeout, opts.Sweep = time.Second, time.Hour
	// Every input comes from one address: with the write rate limits on,
	// most writes would be 429 before their body is read.
	opts.API = func(_ int, d *api.Deps) { d.Limits.WriteRate = 0 }
	c := apitest.Start(f, opts)
	fc := &fuzzCluster{
		c:       c,
		owner:   fingerprint(c.Tokens.Member),
		secrets: map[string]string{"fixture": "", "other": ""},
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	f.Cleanup(fc.client.CloseIdleConnections)
	fc.limits = c.Nodes[c.Leader()].Node.FSM().Limits()
	if err := fc.restore(); err != nil {
		f.Fatal(err)
	}
	return fc
}

// leader returns the ready leader, waiting up to 20 s for one.
func (fc *fuzzCluster) leader() (int, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		for i, n := range fc.c.Nodes {
			if n.Node.IsLeader() && n.Node.Ready() {
				return i, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, errors.New("no ready leader within 20s")
		}
		time.Sleep(5 * time.Millisecond) // polling for a leader, with a deadline
	}
}

// propose proposes cmd on the leader, following leadership.
func (fc *fuzzCluster) propose(cmd fsm.Command) (any, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		i, err := fc.leader()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		applied, err := fc.c.Nodes[i].Node.Propose(ctx, cmd)
		cancel()
		retry := errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNoLeader) || errors.Is(err, cluster.ErrNotReady) || errors.Is(err, cluster.ErrOutcomeUnknown)
		if !retry || time.Now().After(deadline) {
			return applied.Value, err
		}
	}
}

// waitApplied waits until every node has applied what the leader has, and
// returns the leader's index and state hash at that point.
func (fc *fuzzCluster) waitApplied() (uint64, string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		i, err := fc.leader()
		if err != nil {
			return 0, "", err
		}
		index, hash := fc.c.Nodes[i].Node.FSM().AppliedHash()
		same := true
		for _, n := range fc.c.Nodes {
			if ni, nh := n.Node.FSM().AppliedHash(); ni != index || nh != hash {
				same = false
			}
		}
		if same {
			return index, hash, nil
		}
		if time.Now().After(deadline) {
			var got []string
			for _, n := range fc.c.Nodes {
				ni, nh := n.Node.FSM().AppliedHash()
				got = append(got, fmt.Sprintf("%s %d %s", n.Machine, ni, nh))
			}
			return 0, "", fmt.Errorf("the nodes do not reach one applied index and state hash: %v", got)
		}
		time.Sleep(5 * time.Millisecond) // polling for replication, with a deadline
	}
}

// restore brings the state back to the fixtures: it removes what inputs
// created, renews or recreates what they changed or deleted, and waits until
// no record is due within keepTTL and every node applied the same state.
func (fc *fuzzCluster) restore() error {
	admin := fsm.Caller{Owner: fingerprint(fc.c.Tokens.Admin), Admin: true}
	member := fsm.Caller{Owner: fc.owner}
	deadline := time.Now().Add(60 * time.Second)
	for {
		i, err := fc.leader()
		if err != nil {
			return err
		}
		// An input may add a server (never one of ours: see build); it goes.
		for _, p := range fc.c.Nodes[i].Node.Peers() {
			if !slices.ContainsFunc(fc.c.Nodes, func(n *apitest.Node) bool { return n.Machine == p.Machine }) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := fc.c.Nodes[i].Node.RemovePeer(ctx, p.Machine, true)
				cancel()
				if err != nil {
					return fmt.Errorf("remove the server %q an input added: %w", p.Machine, err)
				}
			}
		}
		st := fc.c.Nodes[i].Node.FSM()
		now := st.LastNow()
		var cmds []fsm.Command
		settled := true
		if st.Limits() != fc.limits {
			cmds = append(cmds, fsm.SetLimits{})
		}
		tokens := map[string]fsm.MemberToken{}
		for _, tok := range st.Tokens() {
			tokens[tok.Machine] = tok
			if _, ok := fc.secrets[tok.Machine]; !ok {
				cmds = append(cmds, fsm.RevokeToken{Machine: tok.Machine})
			}
		}
		for _, m := range []string{"fixture", "other"} {
			if tok, ok := tokens[m]; !ok || tok.SHA256 != sumHex(fc.secrets[m]) {
				fc.secrets[m] = testutil.RandomToken()
				cmds = append(cmds, fsm.IssueToken{Machine: m, SHA256: sumHex(fc.secrets[m])})
			}
		}
		kept := map[string]bool{}
		for _, r := range st.Resources("", "") {
			_, fixture := fixtureResources[r.ID]
			switch {
			case fixture && r.ExpiresAt > now+keepTTL && r.Machine == fixtureResources[r.ID][1]:
				kept[r.ID] = true
			case fixture:
				// re-registered below
			case r.ExpiresAt > now:
				cmds = append(cmds, fsm.DeleteResource{Caller: admin, ID: r.ID})
			default:
				settled = false // due: the leader's next Sweep removes it
			}
		}
		for _, id := range slices.Sorted(maps.Keys(fixtureResources)) {
			if !kept[id] {
				kind, machine := fixtureResources[id][0], fixtureResources[id][1]
				cmds = append(cmds, fsm.RegisterResource{Caller: member, ID: id, Kind: kind, Name: machine, Machine: machine,
					Attrs: map[string]json.RawMessage{"load": json.RawMessage(`1`)}, ObservedAt: now, TTLMs: fixtureTTL})
			}
		}
		leaseKept := false
		for _, l := range st.Leases() {
			switch {
			case l.Port == fc.lease.Port && l.LeaseID == fc.lease.LeaseID && l.ExpiresAt > now+keepTTL:
				leaseKept = true
			case l.ExpiresAt > now:
				cmds = append(cmds, fsm.ReleaseLease{Caller: admin, Port: l.Port, LeaseID: l.LeaseID})
			default:
				settled = false
			}
		}
		for _, cmd := range cmds {
			if _, err := fc.propose(cmd); err != nil && !errors.Is(err, fsm.ErrNotFound) {
				return fmt.Errorf("restore the fixtures: %T: %w", cmd, err)
			}
		}
		if !leaseKept && settled && len(cmds) == 0 {
			v, err := fc.propose(fsm.AcquireLease{Caller: member, LeaseID: testutil.RandomToken()[:36], Machine: "fixture", Purpose: "fuzz fixture",
				TTLMs: fixtureTTL, BandStart: bandStart, BandEnd: bandEnd})
			if err != nil {
				return fmt.Errorf("restore the fixture lease: %w", err)
			}
			fc.lease = v.(fsm.PortLease)
			continue
		}
		if len(cmds) == 0 && settled && leaseKept {
			_, _, err := fc.waitApplied()
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fixtures are not restored within 60s (settled %v, %d commands)", settled, len(cmds))
		}
		if len(cmds) == 0 {
			time.Sleep(10 * time.Millisecond) // a due record awaits its Sweep
		}
	}
}

// tables is what a 4xx must not change: every table of the leader's state,
// without the cluster time.
type tables struct {
	Resources  []fsm.Resource
	Leases     []fsm.PortLease
	Tokens     []fsm.MemberToken
	Candidates []fsm.Candidate
	Limits     fsm.Limits
	Primary    fsm.Primary
	Format     int
	Indexes    []uint64
}

// observe reads the tables and the generation of the leader's state.
func (fc *fuzzCluster) observe() (string, uint64, error) {
	i, err := fc.leader()
	if err != nil {
		return "", 0, err
	}
	st := fc.c.Nodes[i].Node.FSM()
	tb := tables{Resources: st.Resources("", ""), Leases: st.Leases(), Tokens: st.Tokens(), Candidates: st.Candidates(),
		Limits: st.Limits(), Primary: st.Primary(), Format: st.Format()}
	for t := fsm.TableResources; t <= fsm.TableCandidates; t++ {
		tb.Indexes = append(tb.Indexes, st.Index(t))
	}
	data, err := json.MarshalIndent(tb, "", " ")
	return string(data), tb.Primary.Generation, err
}

// transient are the 503 codes a loaded machine may answer for any request.
var transient = []string{wire.CodeNoLeader, wire.CodeNotReady, wire.CodeOutcomeUnknown}

// check sends one input and checks the answer and the state (see FuzzHTTP).
func (fc *fuzzCluster) check(t *testing.T, in fuzzRequest) {
	if err := fc.restore(); err != nil {
		t.Fatal(err)
	}
	before, genBefore, err := fc.observe()
	if err != nil {
		t.Fatal(err)
	}
	req, blocking, ok := fc.build(in)
	if !ok {
		return // not a request an HTTP client can send
	}
	r, err := fc.send(req, in, blocking)
	if errors.Is(err, context.DeadlineExceeded) && blocking {
		return // a blocking query that waits: as it should
	}
	if err != nil {
		t.Fatalf("%s %s: no answer: %v", in.method, req.URL, err)
	}
	if r.Status == http.StatusServiceUnavailable && slices.Contains(transient, errorCode(r)) {
		// A missed budget on a loaded machine, or an answer to the input?
		// Once the cluster is ready the same request must get another
		// answer, if not at once then at one of two more tries.
		for range 3 {
			if err := fc.restore(); err != nil {
				t.Fatal(err)
			}
			again, blocking, ok := fc.build(in)
			if !ok {
				t.Fatalf("%s %s: could be built once only", in.method, req.URL)
			}
			r2, err := fc.send(again, in, blocking)
			if errors.Is(err, context.DeadlineExceeded) && blocking {
				return
			}
			if err != nil {
				t.Fatalf("%s %s: no answer when sent again: %v", in.method, req.URL, err)
			}
			if r2.Status != http.StatusServiceUnavailable {
				return // the first attempt's outcome is unknown: no state check
			}
			r = r2
		}
		t.Fatalf("%s %s: %s, four times, the last three to a ready cluster", in.method, req.URL, r)
	}
	if r.Status >= 500 {
		t.Fatalf("%s %s (auth %d, follower %v): %s", in.method, req.URL, in.auth%authChoices, in.follower, r)
	}
	if r.Status >= 400 && in.method != http.MethodHead {
		if err := testutil.CheckError(r, ""); err != nil {
			t.Fatalf("%s %s: %s: %v", in.method, req.URL, r, err)
		}
	}
	if r.Status < 300 && len(r.Body) > 0 {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" && !json.Valid(r.Body) {
			t.Fatalf("%s %s: %s: the body is not JSON", in.method, req.URL, r)
		}
	}
	if r.Status >= 400 && r.Status < 500 {
		after, genAfter, err := fc.observe()
		if err != nil {
			t.Fatal(err)
		}
		if genAfter == genBefore && after != before {
			t.Fatalf("%s %s: %s changed the state:\n%s\nwas\n%s", in.method, req.URL, r, after, before)
		}
	}
	if _, _, err := fc.waitApplied(); err != nil {
		t.Fatal(err)
	}
}

// build makes the input's request, and reports whether it is a blocking
// query and whether a client can send it at all.
func (fc *fuzzCluster) build(in fuzzRequest) (*http.Request, bool, bool) {
	leader, err := fc.leader()
	if err != nil {
		return nil, false, false
	}
	node := fc.c.Nodes[leader]
	if in.follower {
		node = fc.c.Nodes[(leader+1)%len(fc.c.Nodes)]
	}
	path := strings.ReplaceAll(in.path, fuzzPort, strconv.Itoa(fc.lease.Port))
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	leaseID := strings.ReplaceAll(in.leaseID, fuzzLease, fc.lease.LeaseID)
	if len(path) > 4096 || len(in.rawAuth)+len(in.contentType)+len(leaseID)+len(in.idemKey)+len(in.header)+len(in.value) > 8192 {
		return nil, false, false // beyond the server's header limit: net/http answers, not the API
	}
	var body io.Reader = bytes.NewReader(in.body)
	if in.chunked {
		body = io.MultiReader(bytes.NewReader(in.body)) // no length: chunked
	}
	req, err := http.NewRequest(in.method, node.URL+path, body)
	if err != nil || req.URL.Host != strings.TrimPrefix(node.URL, "http://") {
		return nil, false, false
	}
	if in.method != http.MethodGet && strings.Contains(req.URL.Path, "/cluster/peers") {
		// Membership writes: an input may add, remove, promote or demote a
		// server of its own invention, never one of the three it runs on
		// (in its decoded path or its body, where a JSON escape could
		// hide the name).
		for _, n := range fc.c.Nodes {
			if strings.Contains(req.URL.Path, n.Machine) || bytes.Contains(in.body, []byte(n.Machine)) || bytes.Contains(in.body, []byte(`\u`)) {
				return nil, false, false
			}
		}
	}
	if strings.ContainsFunc(req.URL.RequestURI(), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		// The client would write a space into the request line ("/? x"),
		// which net/http's server refuses (400, text/plain) before the API.
		return nil, false, false
	}
	set := func(name, value string) bool {
		if value == "" {
			return true
		}
		if !validHeader(name, value) {
			return false
		}
		req.Header.Set(name, value)
		return true
	}
	var authz string
	switch in.auth % authChoices {
	case authAdmin:
		authz = testutil.Bearer(fc.c.Tokens.Admin)
	case authMember:
		authz = testutil.Bearer(fc.c.Tokens.Member)
	case authQuery:
		authz = testutil.Bearer(fc.c.Tokens.Query)
	case authFixture:
		authz = testutil.Bearer(fc.secrets["fixture"])
	case authOther:
		authz = testutil.Bearer(fc.secrets["other"])
	case authRaw:
		authz = in.rawAuth
	case authBearerRaw:
		authz = "Bearer " + in.rawAuth
	}
	if !set("Authorization", authz) || !set("Content-Type", in.contentType) || !set(wire.HeaderPortLeaseID, leaseID) ||
		!set(wire.HeaderIdempotencyKey, in.idemKey) || (in.header != "" && !set(in.header, in.value)) {
		return nil, false, false
	}
	// An event stream that opens never ends: it is a wait as a blocking query's is.
	blocking := in.method == http.MethodGet && (req.URL.Query().Has("index") || req.URL.Path == "/v1/events")
	return req, blocking, true
}

// validHeader reports whether a client sends the header as given: a token
// for a name, no control characters but tab in a value, and not one of the
// headers the client writes itself.
func validHeader(name, value string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Trailer", "Te", "Upgrade", "Expect":
		return false
	case http.CanonicalHeaderKey(wire.HeaderForwarded):
		// Known and left open: a client that sends the loop guard makes a
		// follower answer every write 503 no-leader ("forwarded request
		// reached a follower"), and a follower that does not know its token
		// answer 401 without asking the leader. The guard should count only
		// when a peer set it; until then it is kept out of the inputs.
		return false
	}
	return true
}

// send sends req: a blocking query gets 500 ms, anything else 30 s (every
// route's budget is 5 s at most).
func (fc *fuzzCluster) send(req *http.Request, in fuzzRequest, blocking bool) (testutil.Reply, error) {
	timeout := 30 * time.Second
	if blocking {
		timeout = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if in.chunked {
		req.ContentLength = -1
	}
	start := time.Now()
	resp, err := fc.client.Do(req.WithContext(ctx))
	if err != nil {
		return testutil.Reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return testutil.Reply{}, err
	}
	return testutil.Reply{Status: resp.StatusCode, Header: resp.Header, Body: data, Elapsed: time.Since(start)}, nil
}

// errorCode returns the code of an error answer, or "".
func errorCode(r testutil.Reply) string {
	var e wire.Error
	_ = json.Unmarshal(r.Body, &e)
	return e.Error
}

func sumHex(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
