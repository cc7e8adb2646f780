package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

const (
	bandStart = 31450 // apitest servers use the default test band
	bandEnd   = 31499
	memberTTL = 600_000 // member.ts: ttlMs = MAX_RETRY_MS * 2
)

// TestServer_TypeScriptProtocol runs the wire protocol of the TypeScript
// client (member.ts, port-lease-heartbeat.ts) through every candidate: the
// leader and each follower (which forward writes). Every success body is
// decoded strictly into the wire types.
func TestServer_TypeScriptProtocol(t *testing.T) {
	if got, want := member.EscapeID("machine:mbp"), "machine%3Ambp"; got != want {
		t.Fatalf("member.EscapeID(machine:mbp) = %q, want %q", got, want)
	}
	if got, want := member.EscapeID("instance:host/1"), "instance%3Ahost%2F1"; got != want {
		t.Fatalf("member.EscapeID(instance:host/1) = %q, want %q", got, want)
	}
	c := apitest.Start(t, clusterOptions())
	leader := c.Leader()
	// A machine token for the same machine the cluster member token works
	// for: same machine, different owner.
	mbp := issueToken(t, c, c.Nodes[leader].URL, "mbp")
	c.WaitApplied()
	for i, n := range c.Nodes {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		t.Run(n.Machine+"-"+role, func(t *testing.T) {
			t.Run("member", func(t *testing.T) { memberFlow(t, c, n.URL) })
			t.Run("port-lease", func(t *testing.T) { portLeaseFlow(t, c, n.URL, mbp.Token) })
			t.Run("idempotency-key", func(t *testing.T) { idempotencyFlow(t, c, n.URL, mbp.Token) })
			t.Run("band-exhausted", func(t *testing.T) { exhaustionFlow(t, c, n.URL) })
		})
	}
}

// memberFlow is member.ts: register machine and instance, heartbeat both by
// their encodeURIComponent'd ids, delete, then a heartbeat gets 404 (on
// which the client re-registers).
func memberFlow(t *testing.T, c *apitest.Cluster, url string) {
	memberToken := c.Tokens.Member
	now := time.Now().UnixMilli()
	load := func(at int64) map[string]any {
		return map[string]any{"loadAvg": []float64{0.52, 0.31, 0.2}, "cpuCount": 8,
			"freeMem": 3 << 30, "totalMem": 16 << 30, "observedAt": at}
	}
	// The bodies exactly as member.ts builds them (…opts.machine, kind,
	// machine, owner: "", attrs, observedAt, ttlMs).
	machineBody := map[string]any{
		"id": "machine:mbp", "name": "mbp",
		"attrs": map[string]any{"duties": []string{"nexus"}, "load": load(now)},
		"kind":  "machine", "machine": "mbp", "owner": "", "observedAt": now, "ttlMs": memberTTL,
	}
	instanceBody := map[string]any{
		"id": "instance:host/1", "name": "host/1", "endpoint": "http://10.0.0.7:31460",
		"attrs": map[string]any{}, "kind": "instance", "machine": "mbp", "owner": "",
		"observedAt": now, "ttlMs": memberTTL,
	}
	registered := map[string]wire.Resource{}
	for _, body := range []map[string]any{machineBody, instanceBody} {
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/resources/register", memberToken, body))
		testutil.WantStatus(t, "register "+body["id"].(string), r, http.StatusOK)
		res := testutil.Decode[wire.Resource](t, r)
		if res.ID != body["id"] || res.Kind != body["kind"] || res.Name != body["name"] || res.Machine != "mbp" {
			t.Fatalf("register = %+v, want the id, kind, name and machine sent", res)
		}
		if res.Owner != fingerprint(memberToken) {
			t.Errorf("register owner = %q, want the token fingerprint %q (the client's owner is ignored)", res.Owner, fingerprint(memberToken))
		}
		if res.TTLMs != memberTTL || res.ObservedAt != now || res.ExpiresAt != res.RenewedAt+memberTTL {
			t.Errorf("register ttlMs=%d observedAt=%d expiresAt=%d renewedAt=%d, want ttl %d, observedAt %d, expiresAt = renewedAt + ttl",
				res.TTLMs, res.ObservedAt, res.ExpiresAt, res.RenewedAt, memberTTL, now)
		}
		if ep, _ := body["endpoint"].(string); res.Endpoint != ep {
			t.Errorf("register endpoint = %q, want %q", res.Endpoint, ep)
		}
		registered[res.ID] = res
	}

	later := now + 30_000
	heartbeats := []struct {
		id, path string
		body     any
	}{
		{"machine:mbp", "/v1/resources/machine%3Ambp/heartbeat", map[string]any{"attrs": map[string]any{"load": load(later)}}},
		{"instance:host/1", "/v1/resources/instance%3Ahost%2F1/heartbeat", map[string]any{}},
	}
	for _, hb := range heartbeats {
		if got := "/v1/resources/" + member.EscapeID(hb.id) + "/heartbeat"; got != hb.path {
			t.Fatalf("heartbeat path = %q, want %q", got, hb.path)
		}
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+hb.path, memberToken, hb.body))
		testutil.WantStatus(t, "heartbeat "+hb.id, r, http.StatusOK)
		got := testutil.Decode[wire.HeartbeatResponse](t, r)
		if got.ID != hb.id || got.ExpiresAt < registered[hb.id].ExpiresAt {
			t.Fatalf("heartbeat %s = %+v, want id %q and expiresAt >= %d", hb.id, got, hb.id, registered[hb.id].ExpiresAt)
		}
	}

	// attrs are merged key by key: duties kept, load replaced.
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: url + "/v1/resources/machine%3Ambp?consistent=true", Auth: testutil.Bearer(c.Tokens.Query)})
	testutil.WantStatus(t, "GET machine:mbp", r, http.StatusOK)
	res := testutil.Decode[wire.Resource](t, r)
	var gotLoad struct {
		ObservedAt int64 `json:"observedAt"`
	}
	if err := json.Unmarshal(res.Attrs["load"], &gotLoad); err != nil || gotLoad.ObservedAt != later {
		t.Errorf("attrs.load after heartbeat = %s, want observedAt %d", res.Attrs["load"], later)
	}
	if string(res.Attrs["duties"]) != `["nexus"]` {
		t.Errorf("attrs.duties after heartbeat = %s, want [\"nexus\"] kept", res.Attrs["duties"])
	}
	r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: url + "/v1/resources?kind=instance&machine=mbp&consistent=true", Auth: testutil.Bearer(c.Tokens.Query)})
	testutil.WantStatus(t, "GET /v1/resources?kind=instance", r, http.StatusOK)
	list := testutil.Decode[[]wire.Resource](t, r)
	if len(list) != 1 || list[0].ID != "instance:host/1" {
		t.Errorf("GET /v1/resources?kind=instance&machine=mbp = %+v, want [instance:host/1]", list)
	}

	for _, hb := range heartbeats {
		del := testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: url + "/v1/resources/" + member.EscapeID(hb.id), Auth: testutil.Bearer(memberToken)})
		testutil.WantStatus(t, "DELETE "+hb.id, del, http.StatusNoContent)
		if len(del.Body) != 0 {
			t.Errorf("DELETE %s body = %q, want empty", hb.id, del.Body)
		}
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+hb.path, memberToken, hb.body))
		testutil.WantError(t, "heartbeat after delete "+hb.id, r, http.StatusNotFound, wire.CodeNotFound)
	}
	// On 404 the client re-registers at once.
	r = testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/resources/register", memberToken, machineBody))
	testutil.WantStatus(t, "re-register after 404", r, http.StatusOK)
	r = testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: url + "/v1/resources/machine%3Ambp", Auth: testutil.Bearer(memberToken)})
	testutil.WantStatus(t, "DELETE after re-register", r, http.StatusNoContent)
}

// portLeaseFlow is port-lease-heartbeat.ts around an acquire.
func portLeaseFlow(t *testing.T, c *apitest.Cluster, url, machineToken string) {
	defer releaseAll(t, c)
	member := c.Tokens.Member
	l := acquire(t, url, member, wire.AcquireRequest{Machine: "mbp", Purpose: "dev-server", TTLMs: memberTTL})
	gen := c.Nodes[c.Leader()].Node.FSM().Primary().Generation
	switch {
	case l.Port < bandStart || l.Port > bandEnd:
		t.Fatalf("acquire port = %d, want one in %d-%d", l.Port, bandStart, bandEnd)
	case l.ID != fmt.Sprintf("port-lease:%d", l.Port) || l.LeaseID == "" || l.Machine != "mbp" || l.Purpose != "dev-server":
		t.Fatalf("acquire = %+v, want id port-lease:<port>, a lease id, machine mbp, purpose dev-server", l)
	case l.Owner != fingerprint(member):
		t.Errorf("acquire owner = %q, want %q", l.Owner, fingerprint(member))
	case l.TTLMs != memberTTL || l.ExpiresAt != l.GrantedAt+memberTTL:
		t.Errorf("acquire ttlMs=%d expiresAt=%d grantedAt=%d, want %d and expiresAt = grantedAt + ttl", l.TTLMs, l.ExpiresAt, l.GrantedAt, memberTTL)
	case l.Generation != gen || l.Fence == 0:
		t.Errorf("acquire generation=%d fence=%d, want generation %d and a fence", l.Generation, l.Fence, gen)
	}

	hb := leaseCall(http.MethodPost, url, l.Port, member, l.LeaseID)
	if hb.Body != "" || hb.ContentType != "" {
		t.Fatalf("lease heartbeat must carry no body and no content type")
	}
	r := testutil.Send(t, hb)
	testutil.WantStatus(t, "lease heartbeat", r, http.StatusOK)
	got := testutil.Decode[wire.LeaseHeartbeatResponse](t, r)
	if got.Port != l.Port || got.LeaseID != l.LeaseID || got.ExpiresAt < l.ExpiresAt {
		t.Fatalf("lease heartbeat = %+v, want port %d, lease %s, expiresAt >= %d", got, l.Port, l.LeaseID, l.ExpiresAt)
	}
	t.Logf("lease heartbeat through %s took %v (the client's timeout is 1 s)", url, r.Elapsed)

	errorsCases := []struct {
		name   string
		call   testutil.Call
		status int
		code   string
	}{
		{"another lease id", leaseCall(http.MethodPost, url, l.Port, member, "00000000-0000-0000-0000-000000000000"), http.StatusConflict, wire.CodeLeaseMismatch},
		{"another owner", leaseCall(http.MethodPost, url, l.Port, machineToken, l.LeaseID), http.StatusForbidden, wire.CodeForbidden},
		{"admin cannot renew", leaseCall(http.MethodPost, url, l.Port, c.Tokens.Admin, l.LeaseID), http.StatusForbidden, wire.CodeForbidden},
		{"port below the band", leaseCall(http.MethodPost, url, bandStart-1, member, l.LeaseID), http.StatusBadRequest, wire.CodeInvalidPortLease},
		{"port above the band", leaseCall(http.MethodPost, url, bandEnd+1, member, l.LeaseID), http.StatusBadRequest, wire.CodeInvalidPortLease},
		{"unleased port", leaseCall(http.MethodPost, url, unleasedPort(t, c), member, l.LeaseID), http.StatusNotFound, wire.CodeNotFound},
		{"missing header", leaseCall(http.MethodPost, url, l.Port, member, ""), http.StatusBadRequest, wire.CodeInvalidPortLease},
		{"release with another lease id", leaseCall(http.MethodDelete, url, l.Port, member, "other"), http.StatusConflict, wire.CodeLeaseMismatch},
		{"release by another owner", leaseCall(http.MethodDelete, url, l.Port, machineToken, l.LeaseID), http.StatusForbidden, wire.CodeForbidden},
		{"release without header", leaseCall(http.MethodDelete, url, l.Port, member, ""), http.StatusBadRequest, wire.CodeInvalidPortLease},
	}
	for _, tc := range errorsCases {
		t.Run(tc.name, func(t *testing.T) {
			testutil.WantError(t, tc.name, testutil.Send(t, tc.call), tc.status, tc.code)
		})
	}

	r = testutil.Send(t, leaseCall(http.MethodDelete, url, l.Port, member, l.LeaseID))
	testutil.WantStatus(t, "release", r, http.StatusNoContent)
	r = testutil.Send(t, leaseCall(http.MethodDelete, url, l.Port, member, l.LeaseID))
	testutil.WantError(t, "release again", r, http.StatusNotFound, wire.CodeNotFound)
	r = testutil.Send(t, leaseCall(http.MethodPost, url, l.Port, member, l.LeaseID))
	testutil.WantError(t, "heartbeat after release", r, http.StatusNotFound, wire.CodeNotFound)
}

// unleasedPort returns a port of the band with no lease on the leader.
func unleasedPort(t *testing.T, c *apitest.Cluster) int {
	t.Helper()
	held := map[int]bool{}
	for _, l := range c.Nodes[c.Leader()].Node.FSM().Leases() {
		held[l.Port] = true
	}
	for p := bandEnd; p >= bandStart; p-- {
		if !held[p] {
			return p
		}
	}
	t.Fatalf("every port of the band is leased")
	return 0
}

func acquireCall(url, token, key string, req wire.AcquireRequest) testutil.Call {
	cl := testutil.JSONCall(http.MethodPost, url+"/v1/leases/port", token, req)
	if key != "" {
		cl.Header = map[string]string{wire.HeaderIdempotencyKey: key}
	}
	return cl
}

// idempotencyFlow: the same Idempotency-Key from the same owner returns the
// same lease; a plain second acquire gets the next port; the same key from
// another owner is another lease.
func idempotencyFlow(t *testing.T, c *apitest.Cluster, url, machineToken string) {
	defer releaseAll(t, c)
	member := c.Tokens.Member
	req := wire.AcquireRequest{Machine: "mbp", Purpose: "dev-server", TTLMs: memberTTL}
	key := "acquire-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	r := testutil.Send(t, acquireCall(url, member, key, req))
	testutil.WantStatus(t, "acquire with key", r, http.StatusCreated)
	first := testutil.Decode[wire.PortLease](t, r)
	if first.Port != bandStart {
		t.Fatalf("first acquire port = %d, want %d (the band is free)", first.Port, bandStart)
	}
	r = testutil.Send(t, acquireCall(url, member, key, req))
	testutil.WantStatus(t, "repeat acquire with key", r, http.StatusCreated)
	// The same lease, renewed from the repeat (its TTL counts from there).
	again := testutil.Decode[wire.PortLease](t, r)
	renewed := first
	renewed.RenewedAt, renewed.ExpiresAt = again.RenewedAt, again.RenewedAt+first.TTLMs
	if again != renewed || again.RenewedAt < first.RenewedAt {
		t.Fatalf("repeat acquire with the same key = %+v, want the same lease %+v renewed", again, first)
	}
	second := acquire(t, url, member, req)
	if second.Port != first.Port+1 || second.LeaseID == first.LeaseID {
		t.Fatalf("second acquire = port %d lease %s, want port %d and a new lease id", second.Port, second.LeaseID, first.Port+1)
	}
	r = testutil.Send(t, acquireCall(url, machineToken, key, req))
	testutil.WantStatus(t, "acquire with the key by another owner", r, http.StatusCreated)
	other := testutil.Decode[wire.PortLease](t, r)
	if other.LeaseID == first.LeaseID || other.Port == first.Port || other.Owner != fingerprint(machineToken) {
		t.Fatalf("same key from another owner = %+v, want a new lease owned by %s", other, fingerprint(machineToken))
	}
	if n := len(c.Nodes[c.Leader()].Node.FSM().Leases()); n != 3 {
		t.Fatalf("leases held = %d, want 3", n)
	}
}

// exhaustionFlow shrinks the band with excluded until no port is free.
func exhaustionFlow(t *testing.T, c *apitest.Cluster, url string) {
	defer releaseAll(t, c)
	member := c.Tokens.Member
	held := acquire(t, url, member, wire.AcquireRequest{Machine: "mbp", Purpose: "first", TTLMs: memberTTL})
	free := held.Port + 1
	var excluded []int
	for p := bandStart; p <= bandEnd; p++ {
		if p != held.Port && p != free {
			excluded = append(excluded, p)
		}
	}
	req := wire.AcquireRequest{Machine: "mbp", Purpose: "last", TTLMs: memberTTL, Excluded: excluded}
	last := acquire(t, url, member, req)
	if last.Port != free {
		t.Fatalf("acquire with %d ports excluded got port %d, want %d", len(excluded), last.Port, free)
	}
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/leases/port", member, req))
	testutil.WantError(t, "acquire from an exhausted band", r, http.StatusConflict, wire.CodePortBandExhausted)
}
