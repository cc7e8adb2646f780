package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// badCase is one bad request and the 4xx it must get.
type badCase struct {
	name   string
	call   testutil.Call
	status int
	code   string
}

// stateOf is what bad input must not change: every node's state hash and the
// leader's last log index (nothing may even be proposed).
type stateOf struct {
	hashes     []string
	lastIndex  uint64
	generation uint64
}

func snapshotState(c *apitest.Cluster) stateOf {
	leader := c.Nodes[c.Leader()]
	s := stateOf{lastIndex: leader.Node.Raft().LastIndex(), generation: leader.Node.FSM().Primary().Generation}
	for _, n := range c.Nodes {
		s.hashes = append(s.hashes, n.Node.FSM().Hash())
	}
	return s
}

// TestServer_BadInput sends bad input of every kind to every endpoint,
// through the leader and through a follower. Each gets its documented 4xx with
// a JSON error, and the state is unchanged: no node's state hash moves and the
// leader's log does not grow. The cluster sweeps only at a due expiry (Sweep:
// 1h) and every TTL is long, so nothing else appends to the log meanwhile.
func TestServer_BadInput(t *testing.T) {
	opts := clusterOptions()
	opts.Sweep = time.Hour
	c := apitest.Start(t, opts)
	leader := c.Nodes[c.Leader()]
	member, admin, query := c.Tokens.Member, c.Tokens.Admin, c.Tokens.Query

	// Fixtures the bad requests aim at: a live resource, a live lease and a machine token.
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/register", member, registerBody(nil)))
	testutil.WantStatus(t, "fixture register", r, http.StatusOK)
	lease := acquire(t, leader.URL, member, wire.AcquireRequest{Machine: "fixture", Purpose: "bad-input", TTLMs: memberTTL})
	issueToken(t, c, leader.URL, "fixture")
	c.WaitApplied()

	for _, target := range []struct {
		role string
		node *apitest.Node
	}{{"leader", leader}, {"follower", c.Nodes[c.Follower()]}} {
		t.Run(target.role, func(t *testing.T) {
			for _, tc := range badCases(target.node.URL, member, admin, query, lease) {
				t.Run(tc.name, func(t *testing.T) {
					for attempt := 1; ; attempt++ {
						before := snapshotState(c)
						r := testutil.Send(t, tc.call)
						testutil.WantError(t, tc.name, r, tc.status, tc.code)
						after := snapshotState(c)
						if after.generation != before.generation && attempt < 3 {
							// A leadership change (a loaded machine) appends a
							// claim: measure again under the new leader.
							t.Logf("leadership changed during the request; again")
							continue
						}
						if after.lastIndex != before.lastIndex {
							t.Fatalf("%s: the leader's last index moved %d → %d: bad input was proposed", tc.name, before.lastIndex, after.lastIndex)
						}
						if !slices.Equal(after.hashes, before.hashes) {
							t.Fatalf("%s: state hashes changed %v → %v", tc.name, before.hashes, after.hashes)
						}
						return
					}
				})
			}
		})
	}

	// ttlMs above 24 h is capped for a lease, not refused.
	t.Run("lease ttl over 24h is capped", func(t *testing.T) {
		defer releaseAll(t, c)
		for _, ttl := range []int64{wire.MaxLeaseTTLMs + 1, 7 * wire.MaxLeaseTTLMs} {
			l := acquire(t, c.Nodes[c.Follower()].URL, member, wire.AcquireRequest{Machine: "fixture", Purpose: "long", TTLMs: ttl})
			if l.TTLMs != wire.MaxLeaseTTLMs || l.ExpiresAt-l.GrantedAt != wire.MaxLeaseTTLMs {
				t.Errorf("acquire ttlMs %d = ttlMs %d, expiresAt-grantedAt %d, want both %d", ttl, l.TTLMs, l.ExpiresAt-l.GrantedAt, wire.MaxLeaseTTLMs)
			}
		}
	})
}

// registerBody is a valid register body (as member.ts sends it) with edits applied.
func registerBody(edit func(m map[string]any)) map[string]any {
	m := map[string]any{"id": "machine:fixture", "name": "fixture", "kind": "machine", "machine": "fixture",
		"owner": "", "attrs": map[string]any{"load": 1}, "observedAt": 1, "ttlMs": memberTTL}
	if edit != nil {
		edit(m)
	}
	return m
}

func acquireBody(edit func(m map[string]any)) map[string]any {
	m := map[string]any{"machine": "fixture", "purpose": "dev", "ttlMs": memberTTL}
	if edit != nil {
		edit(m)
	}
	return m
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func badCases(url, member, admin, query string, lease wire.PortLease) []badCase {
	const (
		bad       = http.StatusBadRequest
		tooLarge  = http.StatusRequestEntityTooLarge
		invalid   = wire.CodeInvalidRequest
		badLease  = wire.CodeInvalidPortLease
		bodyLarge = wire.CodeBodyTooLarge
	)
	post := func(path, token, body string) testutil.Call {
		return testutil.Call{Method: http.MethodPost, URL: url + path, Auth: testutil.Bearer(token), Body: body, ContentType: "application/json"}
	}
	req := func(method, path, token string) testutil.Call {
		return testutil.Call{Method: method, URL: url + path, Auth: testutil.Bearer(token)}
	}
	chunked := func(c testutil.Call) testutil.Call {
		c.Chunked = true
		return c
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	bigAttrs := map[string]any{"blob": strings.Repeat("x", 17<<10)}  // over 16 KiB, under 64 KiB
	hugeAttrs := map[string]any{"blob": strings.Repeat("x", 65<<10)} // a body over 64 KiB
	long := strings.Repeat("m", 300)
	validReg := mustJSON(registerBody(nil))
	validAcq := mustJSON(acquireBody(nil))
	badMachines := map[string]string{"__proto__": "__proto__", "constructor": "constructor", "prototype": "prototype",
		"empty": "", "300 chars": long, "non-ASCII": "mäc", "leading dash": "-mac", "space": "m c"}

	var cases []badCase
	add := func(name string, c testutil.Call, status int, code string) {
		cases = append(cases, badCase{name, c, status, code})
	}

	// POST /v1/resources/register
	reg := func(body string) testutil.Call { return post("/v1/resources/register", member, body) }
	add("register/malformed JSON", reg(`{"id":`), bad, invalid)
	add("register/not JSON", reg(`id=machine:fixture`), bad, invalid)
	add("register/array", reg(`[]`), bad, invalid)
	add("register/null", reg(`null`), bad, invalid)
	add("register/empty body", reg(""), bad, invalid)
	add("register/unknown field", reg(mustJSON(registerBody(set("bogus", 1)))), bad, invalid)
	add("register/trailing object", reg(validReg+`{}`), bad, invalid)
	add("register/trailing garbage", reg(validReg+` x`), bad, invalid)
	add("register/trailing brace", reg(validReg+`}`), bad, invalid)
	add("register/ttlMs string", reg(mustJSON(registerBody(set("ttlMs", "600000")))), bad, invalid)
	add("register/ttlMs fraction", reg(mustJSON(registerBody(set("ttlMs", 1.5)))), bad, invalid)
	add("register/id number", reg(mustJSON(registerBody(set("id", 5)))), bad, invalid)
	add("register/attrs array", reg(mustJSON(registerBody(set("attrs", []int{1})))), bad, invalid)
	add("register/attrs string", reg(mustJSON(registerBody(set("attrs", "x")))), bad, invalid)
	add("register/observedAt string", reg(mustJSON(registerBody(set("observedAt", "now")))), bad, invalid)
	add("register/body over 64 KiB", reg(mustJSON(registerBody(set("attrs", hugeAttrs)))), tooLarge, bodyLarge)
	add("register/chunked body over 64 KiB", chunked(reg(mustJSON(registerBody(set("attrs", hugeAttrs))))), tooLarge, bodyLarge)
	add("register/attrs over 16 KiB", reg(mustJSON(registerBody(set("attrs", bigAttrs)))), bad, invalid)
	for name, m := range badMachines {
		add("register/machine "+name, reg(mustJSON(registerBody(set("machine", m)))), bad, invalid)
	}
	add("register/id empty", reg(mustJSON(registerBody(set("id", "")))), bad, invalid)
	add("register/id NUL", reg(mustJSON(registerBody(set("id", "machine:a\x00b")))), bad, invalid)
	add("register/id newline", reg(mustJSON(registerBody(set("id", "machine:a\nb")))), bad, invalid)
	add("register/id DEL", reg(mustJSON(registerBody(set("id", "machine:a\x7fb")))), bad, invalid)
	add("register/id 513 bytes", reg(mustJSON(registerBody(set("id", strings.Repeat("i", 513))))), bad, invalid)
	add("register/ttlMs 0", reg(mustJSON(registerBody(set("ttlMs", 0)))), bad, invalid)
	add("register/ttlMs missing", reg(mustJSON(registerBody(del("ttlMs")))), bad, invalid)
	add("register/ttlMs negative", reg(mustJSON(registerBody(set("ttlMs", -1)))), bad, invalid)
	add("register/ttlMs over 24h", reg(mustJSON(registerBody(set("ttlMs", 24*3600*1000+1)))), bad, invalid)
	add("register/observedAt negative", reg(mustJSON(registerBody(set("observedAt", -1)))), bad, invalid)
	add("register/kind empty", reg(mustJSON(registerBody(set("kind", "")))), bad, invalid)
	add("register/kind uppercase", reg(mustJSON(registerBody(set("kind", "Machine")))), bad, invalid)
	add("register/name empty", reg(mustJSON(registerBody(set("name", "")))), bad, invalid)
	add("register/name control", reg(mustJSON(registerBody(set("name", "a\tb")))), bad, invalid)

	// POST /v1/resources/{id}/heartbeat
	hb := func(body string) testutil.Call {
		return post("/v1/resources/machine%3Afixture/heartbeat", member, body)
	}
	add("heartbeat/malformed JSON", hb(`{"attrs":`), bad, invalid)
	add("heartbeat/unknown field", hb(`{"attrs":{},"x":1}`), bad, invalid)
	add("heartbeat/trailing data", hb(`{}{}`), bad, invalid)
	add("heartbeat/array", hb(`[]`), bad, invalid)
	add("heartbeat/attrs array", hb(`{"attrs":[]}`), bad, invalid)
	add("heartbeat/attrs string", hb(`{"attrs":"x"}`), bad, invalid)
	add("heartbeat/body over 64 KiB", hb(mustJSON(map[string]any{"attrs": hugeAttrs})), tooLarge, bodyLarge)
	add("heartbeat/attrs over 16 KiB", hb(mustJSON(map[string]any{"attrs": bigAttrs})), bad, invalid)
	add("heartbeat/id empty", post("/v1/resources//heartbeat", member, `{}`), bad, invalid)
	add("heartbeat/id NUL", post("/v1/resources/machine%3Aa%00b/heartbeat", member, `{}`), bad, invalid)
	add("heartbeat/id newline", post("/v1/resources/machine%3Aa%0Ab/heartbeat", member, `{}`), bad, invalid)
	add("heartbeat/id DEL", post("/v1/resources/a%7Fb/heartbeat", member, ``), bad, invalid)

	// DELETE /v1/resources/{id}
	add("delete resource/id NUL", req(http.MethodDelete, "/v1/resources/a%00b", member), bad, invalid)
	add("delete resource/id newline", req(http.MethodDelete, "/v1/resources/a%0Ab", member), bad, invalid)
	bigDelete := req(http.MethodDelete, "/v1/resources/machine%3Afixture", member)
	bigDelete.Body = mustJSON(hugeAttrs)
	add("delete resource/body over 64 KiB", bigDelete, tooLarge, bodyLarge)

	// GET /v1/resources and /v1/resources/{id}
	add("get resource/id NUL", req(http.MethodGet, "/v1/resources/a%00b", query), bad, invalid)
	add("get resource/id newline", req(http.MethodGet, "/v1/resources/a%0Ab", query), bad, invalid)
	add("list resources/index not a number", req(http.MethodGet, "/v1/resources?index=x", query), bad, invalid)
	add("list resources/index negative", req(http.MethodGet, "/v1/resources?index=-1", query), bad, invalid)
	add("list resources/wait over 5m", req(http.MethodGet, "/v1/resources?index=1&wait=6m", query), bad, invalid)
	add("list resources/wait garbage", req(http.MethodGet, "/v1/resources?index=1&wait=soon", query), bad, invalid)
	add("list resources/consistent garbage", req(http.MethodGet, "/v1/resources?consistent=maybe", query), bad, invalid)

	// POST /v1/leases/port: every bad acquire is 400 invalid-port-lease.
	acq := func(body string) testutil.Call { return post("/v1/leases/port", member, body) }
	add("acquire/malformed JSON", acq(`{"machine":`), bad, badLease)
	add("acquire/unknown field", acq(mustJSON(acquireBody(set("bogus", true)))), bad, badLease)
	add("acquire/trailing data", acq(validAcq+`[]`), bad, badLease)
	add("acquire/empty body", acq(""), bad, badLease)
	add("acquire/ttlMs string", acq(mustJSON(acquireBody(set("ttlMs", "1000")))), bad, badLease)
	add("acquire/excluded string", acq(mustJSON(acquireBody(set("excluded", "31450")))), bad, badLease)
	add("acquire/excluded fraction", acq(mustJSON(acquireBody(set("excluded", []float64{31450.5})))), bad, badLease)
	add("acquire/machine number", acq(mustJSON(acquireBody(set("machine", 7)))), bad, badLease)
	add("acquire/body over 64 KiB", acq(mustJSON(acquireBody(set("owner", strings.Repeat("o", 65<<10))))), tooLarge, bodyLarge)
	for name, m := range badMachines {
		add("acquire/machine "+name, acq(mustJSON(acquireBody(set("machine", m)))), bad, badLease)
	}
	add("acquire/purpose empty", acq(mustJSON(acquireBody(set("purpose", "")))), bad, badLease)
	add("acquire/purpose blank", acq(mustJSON(acquireBody(set("purpose", "   ")))), bad, badLease)
	add("acquire/ttlMs 0", acq(mustJSON(acquireBody(set("ttlMs", 0)))), bad, badLease)
	add("acquire/ttlMs missing", acq(mustJSON(acquireBody(del("ttlMs")))), bad, badLease)
	add("acquire/ttlMs negative", acq(mustJSON(acquireBody(set("ttlMs", -600000)))), bad, badLease)
	add("acquire/excluded below band", acq(mustJSON(acquireBody(set("excluded", []int{bandStart - 1})))), bad, badLease)
	add("acquire/excluded above band", acq(mustJSON(acquireBody(set("excluded", []int{bandStart, bandEnd + 1})))), bad, badLease)
	add("acquire/excluded negative", acq(mustJSON(acquireBody(set("excluded", []int{-1})))), bad, badLease)
	add("acquire/excluded huge", acq(mustJSON(acquireBody(set("excluded", []int64{99999999999})))), bad, badLease)

	// POST /v1/leases/port/{port}/heartbeat and DELETE /v1/leases/port/{port}
	leaseReq := func(method, port, leaseID string) testutil.Call {
		path := "/v1/leases/port/" + port
		if method == http.MethodPost {
			path += "/heartbeat"
		}
		c := req(method, path, member)
		if leaseID != "" {
			c = c.WithHeader(wire.HeaderPortLeaseID, leaseID)
		}
		return c
	}
	held := jsonInt(lease.Port)
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		what := map[string]string{http.MethodPost: "lease heartbeat", http.MethodDelete: "release"}[method]
		for _, p := range []string{"-1", "99999999999", "0", "abc", "+31450", "31450.0", jsonInt(bandStart - 1), jsonInt(bandEnd + 1), "65536"} {
			add(what+"/port "+p, leaseReq(method, p, lease.LeaseID), bad, badLease)
		}
		add(what+"/port empty", leaseReq(method, "", lease.LeaseID), map[string]int{http.MethodPost: bad, http.MethodDelete: http.StatusNotFound}[method], "")
		add(what+"/missing header", leaseReq(method, held, ""), bad, badLease)
		add(what+"/header too long", leaseReq(method, held, strings.Repeat("l", 129)), bad, badLease)
		big := leaseReq(method, held, lease.LeaseID)
		big.Body = strings.Repeat(" ", 65<<10)
		add(what+"/body over 64 KiB", big, tooLarge, bodyLarge)
	}

	// GET /v1/leases/port/{port}
	for _, p := range []string{"-1", "99999999999", "abc"} {
		add("get lease/port "+p, req(http.MethodGet, "/v1/leases/port/"+p, query), bad, badLease)
	}
	add("list leases/index garbage", req(http.MethodGet, "/v1/leases/port?index=one", query), bad, invalid)

	// POST /v1/tokens/member
	issue := func(body string) testutil.Call { return post("/v1/tokens/member", admin, body) }
	add("issue token/malformed JSON", issue(`{"machine"`), bad, invalid)
	add("issue token/unknown field", issue(`{"machine":"m1","scope":"admin"}`), bad, invalid)
	add("issue token/trailing data", issue(`{"machine":"m1"} {"machine":"m2"}`), bad, invalid)
	add("issue token/machine number", issue(`{"machine":1}`), bad, invalid)
	add("issue token/machine missing", issue(`{}`), bad, invalid)
	add("issue token/body over 64 KiB", issue(mustJSON(map[string]string{"machine": strings.Repeat("m", 65<<10)})), tooLarge, bodyLarge)
	for name, m := range badMachines {
		add("issue token/machine "+name, issue(mustJSON(wire.IssueTokenRequest{Machine: m})), bad, invalid)
	}

	// DELETE /v1/tokens/member/{machine}
	for name, p := range map[string]string{"__proto__": "__proto__", "constructor": "constructor", "300 chars": long,
		"non-ASCII": "m%C3%A4c", "NUL": "a%00b", "newline": "a%0Ab"} {
		add("revoke token/machine "+name, req(http.MethodDelete, "/v1/tokens/member/"+p, admin), bad, invalid)
	}

	add("revoke token/machine empty", req(http.MethodDelete, "/v1/tokens/member/", admin), http.StatusNotFound, wire.CodeNotFound)

	// GET /v1/primary (blocking query parameters)
	add("primary/index garbage", req(http.MethodGet, "/v1/primary?index=x", ""), bad, invalid)
	add("primary/wait over 5m", req(http.MethodGet, "/v1/primary?index=1&wait=10m", ""), bad, invalid)

	slices.SortStableFunc(cases, func(a, b badCase) int { return strings.Compare(a.name, b.name) })
	return cases
}

func jsonInt(n int) string { return mustJSON(n) }
