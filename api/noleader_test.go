package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestServer_WriteWithoutLeader stops two of three nodes; every write to the
// survivor answers 503 no-leader with a well-formed body and Retry-After.
// How fast it answers (within 1 s, the contract) is checked end to end on real
// processes, with a margin (cmd/elanous-node TestE2E_WriteWithoutLeader): a
// time bound does not belong in a unit test.
func TestServer_WriteWithoutLeader(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	// The survivor is the leader: stopping a follower hands nothing over,
	// whereas stopping a leader would hand leadership to the survivor, which
	// could then lead for a moment without a quorum. This way the survivor
	// steps down once (it loses its quorum) and can never lead again.
	si := c.Leader()
	survivor := c.Nodes[si]
	lease := acquire(t, survivor.URL, c.Tokens.Member, wire.AcquireRequest{Machine: "lonely", Purpose: "x", TTLMs: memberTTL})
	c.WaitApplied()
	for i := range c.Nodes {
		if i != si {
			c.StopNode(i)
		}
	}
	testutil.WaitFor(t, "the survivor to step down and know no leader", 10*time.Second, func() bool {
		_, known := survivor.Node.Leader()
		return !known && !survivor.Node.IsLeader()
	})

	member, admin := c.Tokens.Member, c.Tokens.Admin
	u := survivor.URL
	noRetry := func(cl testutil.Call) testutil.Call { cl.NoRetry = true; return cl }
	writes := []struct {
		name string
		call testutil.Call
	}{
		{"register", testutil.JSONCall(http.MethodPost, u+"/v1/resources/register", member, wire.RegisterRequest{
			ID: "machine:lonely", Kind: "machine", Name: "lonely", Machine: "lonely", TTLMs: memberTTL})},
		{"resource heartbeat", testutil.JSONCall(http.MethodPost, u+"/v1/resources/machine%3Alonely/heartbeat", member, map[string]any{})},
		{"delete resource", testutil.Call{Method: http.MethodDelete, URL: u + "/v1/resources/machine%3Alonely", Auth: testutil.Bearer(member)}},
		{"acquire", testutil.JSONCall(http.MethodPost, u+"/v1/leases/port", member, wire.AcquireRequest{Machine: "lonely", Purpose: "x", TTLMs: memberTTL})},
		{"lease heartbeat", leaseCall(http.MethodPost, u, lease.Port, member, lease.LeaseID)},
		{"release", leaseCall(http.MethodDelete, u, lease.Port, member, lease.LeaseID)},
		{"issue token", testutil.JSONCall(http.MethodPost, u+"/v1/tokens/member", admin, wire.IssueTokenRequest{Machine: "lonely"})},
		{"revoke token", testutil.Call{Method: http.MethodDelete, URL: u + "/v1/tokens/member/lonely", Auth: testutil.Bearer(admin)}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			r := testutil.Send(t, noRetry(w.call))
			// WantError checks the JSON {error, message} body and, on a 503, Retry-After.
			testutil.WantError(t, w.name+" without a leader", r, http.StatusServiceUnavailable, wire.CodeNoLeader)
		})
	}

	t.Run("ready and primary", func(t *testing.T) {
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: u + "/v1/ready", NoRetry: true})
		testutil.WantError(t, "GET /v1/ready", r, http.StatusServiceUnavailable, "")
		r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: u + "/v1/primary"})
		testutil.WantStatus(t, "GET /v1/primary", r, http.StatusOK)
		if p := testutil.Decode[wire.Primary](t, r); p.Known {
			t.Errorf("GET /v1/primary without a leader = %+v, want known false", p)
		}
	})
}
