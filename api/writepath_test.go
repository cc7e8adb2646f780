package api_test

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// countingRand is a random source that counts its reads.
type countingRand struct{ reads atomic.Int64 }

func (r *countingRand) Read(p []byte) (int, error) {
	r.reads.Add(1)
	return rand.Read(p)
}

// observedCluster is a cluster whose nodes draw from counting random sources
// and record metrics in registries the test reads.
type observedCluster struct {
	*apitest.Cluster
	rand []*countingRand
	reg  registries
}

func startObserved(t *testing.T, opts apitest.Options) *observedCluster {
	t.Helper()
	o := &observedCluster{}
	opts.API = func(i int, d *api.Deps) {
		for len(o.rand) <= i {
			o.rand = append(o.rand, &countingRand{})
			o.reg = append(o.reg, nil)
		}
		o.reg[i] = prometheus.NewRegistry()
		d.Rand, d.Registry = o.rand[i], o.reg[i]
	}
	o.Cluster = apitest.Start(t, opts)
	return o
}

// draws returns how many times each node read its random source.
func (o *observedCluster) draws() []int64 {
	out := make([]int64, len(o.rand))
	for i, r := range o.rand {
		out[i] = r.reads.Load()
	}
	return out
}

// TestServer_FollowerForwardsBeforeHandler checks that a follower forwards a
// write before its handler runs: it draws no lease id or token secret and
// decodes no body; the leader does all of it.
func TestServer_FollowerForwardsBeforeHandler(t *testing.T) {
	c := startObserved(t, clusterOptions())
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	forwardsOK := func() float64 { return c.reg.metric(t, fi, "elanous_forwards_total", "result", "ok") }

	t.Run("acquire and token issue draw on the leader only", func(t *testing.T) {
		before, forwards := c.draws(), forwardsOK()
		l := acquire(t, follower.URL, c.Tokens.Member, wire.AcquireRequest{Machine: "counted", Purpose: "draws", TTLMs: memberTTL})
		if l.LeaseID == "" {
			t.Fatalf("acquire through the follower = %+v, want a lease id", l)
		}
		tok := issueToken(t, c.Cluster, follower.URL, "counted")
		if !wire.ValidToken(tok.Token) {
			t.Fatalf("issue through the follower = %+v, want a token", tok)
		}
		after := c.draws()
		if got := after[fi] - before[fi]; got != 0 {
			t.Errorf("the follower read its random source %d times for a forwarded acquire and token issue, want 0", got)
		}
		if got := after[li] - before[li]; got != 2 {
			t.Errorf("the leader read its random source %d times for an acquire and a token issue, want 2 (one each)", got)
		}
		if got := forwardsOK() - forwards; got != 2 {
			t.Errorf("the follower's elanous_forwards_total{result=ok} rose by %v, want 2", got)
		}
	})

	t.Run("a malformed body is judged by the leader", func(t *testing.T) {
		// Each body stops mid-document: a follower that decoded it would
		// answer 400 itself instead of forwarding. The acquire and the token
		// issue are the writes that draw; a draw on the follower would mean
		// it got as far as the handler.
		for _, tc := range []struct {
			name, path, token, code string
		}{
			{"register", "/v1/resources/register", c.Tokens.Member, wire.CodeInvalidRequest},
			{"acquire", "/v1/leases/port", c.Tokens.Member, wire.CodeInvalidPortLease},
			{"token issue", "/v1/tokens/member", c.Tokens.Admin, wire.CodeInvalidRequest},
		} {
			route := func() float64 {
				return c.reg.metric(t, li, "elanous_http_requests_total", "route", tc.path, "method", "POST", "code", "400")
			}
			draws, forwards, leader400 := c.draws(), forwardsOK(), route()
			r := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: follower.URL + tc.path, Auth: testutil.Bearer(tc.token),
				Body: `{"machine":`, ContentType: "application/json"})
			testutil.WantError(t, "malformed "+tc.name+" through the follower", r, http.StatusBadRequest, tc.code)
			if got := forwardsOK() - forwards; got != 1 {
				t.Errorf("the follower's elanous_forwards_total{result=ok} rose by %v for a malformed %s, want 1: the follower decoded the body itself", got, tc.name)
			}
			if got := route() - leader400; got != 1 {
				t.Errorf("the leader answered %v malformed %s requests with 400, want 1", got, tc.name)
			}
			if got := c.draws()[fi] - draws[fi]; got != 0 {
				t.Errorf("the follower read its random source %d times for a malformed %s, want 0", got, tc.name)
			}
		}
	})

	if c.Leader() != li {
		t.Fatalf("leadership moved from %s during the test; the counts above are not meaningful", leader.Machine)
	}
}

// TestServer_ReadYourWritesThroughFollower writes through a follower and reads
// each write back from that follower at once with a default (local) read.
// The follower must answer a write only once it has applied it: its answer
// carries the entry's index in X-Elanous-Index, and the follower's applied
// index has reached it by the time the answer arrives.
func TestServer_ReadYourWritesThroughFollower(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	follower := c.Nodes[c.Follower()]
	u, memberToken, admin, query := follower.URL, c.Tokens.Member, c.Tokens.Admin, c.Tokens.Query
	const rounds = 20

	// written checks a write's answer: status want and an X-Elanous-Index the
	// follower has applied.
	written := func(t *testing.T, what string, r testutil.Reply, want int) uint64 {
		t.Helper()
		testutil.WantStatus(t, what, r, want)
		index := headerUint(t, r, wire.HeaderIndex)
		if applied := follower.Node.FSM().AppliedIndex(); applied < index {
			t.Fatalf("%s: answered with %s %d while the follower had applied only %d", what, wire.HeaderIndex, index, applied)
		}
		return index
	}
	get := func(path, token string) testutil.Reply {
		return testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: u + path, Auth: testutil.Bearer(token)})
	}

	t.Run("resources", func(t *testing.T) {
		for i := range rounds {
			id := fmt.Sprintf("instance:ryw/%d", i)
			path := "/v1/resources/" + member.EscapeID(id)
			written(t, "register "+id, testutil.Send(t, testutil.JSONCall(http.MethodPost, u+"/v1/resources/register", memberToken, wire.RegisterRequest{
				ID: id, Kind: "instance", Name: "ryw", Machine: "ryw", TTLMs: memberTTL})), http.StatusOK)
			testutil.WantStatus(t, "GET "+id+" right after its register", get(path, query), http.StatusOK)

			r := testutil.Send(t, testutil.JSONCall(http.MethodPost, u+path+"/heartbeat", memberToken, wire.HeartbeatRequest{}))
			written(t, "heartbeat "+id, r, http.StatusOK)
			hb := testutil.Decode[wire.HeartbeatResponse](t, r)
			got := testutil.Decode[wire.Resource](t, get(path, query))
			if got.ExpiresAt != hb.ExpiresAt {
				t.Fatalf("GET %s right after its heartbeat: expiresAt %d, want the heartbeat's %d", id, got.ExpiresAt, hb.ExpiresAt)
			}

			written(t, "delete "+id, testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: u + path, Auth: testutil.Bearer(memberToken)}), http.StatusNoContent)
			testutil.WantStatus(t, "GET "+id+" right after its delete", get(path, query), http.StatusNotFound)
		}
	})

	t.Run("leases", func(t *testing.T) {
		for i := range rounds {
			r := testutil.Send(t, testutil.JSONCall(http.MethodPost, u+"/v1/leases/port", memberToken, wire.AcquireRequest{Machine: "ryw", Purpose: "ryw", TTLMs: memberTTL}))
			index := written(t, "acquire", r, http.StatusCreated)
			l := testutil.Decode[wire.PortLease](t, r)
			if l.Fence != index {
				t.Fatalf("acquire %d: %s = %d, want the grant's index (its fence) %d", i, wire.HeaderIndex, index, l.Fence)
			}
			path := "/v1/leases/port/" + strconv.Itoa(l.Port)
			if got := testutil.Decode[wire.PortLease](t, get(path, query)); got.LeaseID != l.LeaseID {
				t.Fatalf("GET %s right after the acquire = %+v, want lease %s", path, got, l.LeaseID)
			}
			r = testutil.Send(t, leaseCall(http.MethodPost, u, l.Port, memberToken, l.LeaseID))
			written(t, "renew", r, http.StatusOK)
			renewed := testutil.Decode[wire.LeaseHeartbeatResponse](t, r)
			if got := testutil.Decode[wire.PortLease](t, get(path, query)); got.ExpiresAt != renewed.ExpiresAt {
				t.Fatalf("GET %s right after the renewal: expiresAt %d, want %d", path, got.ExpiresAt, renewed.ExpiresAt)
			}
			written(t, "release", testutil.Send(t, leaseCall(http.MethodDelete, u, l.Port, memberToken, l.LeaseID)), http.StatusNoContent)
			testutil.WantStatus(t, "GET "+path+" right after its release", get(path, query), http.StatusNotFound)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		listed := func(machine string) bool {
			for _, ti := range testutil.Decode[[]wire.TokenInfo](t, get("/v1/tokens/member", admin)) {
				if ti.Machine == machine {
					return true
				}
			}
			return false
		}
		for i := range rounds {
			machine := fmt.Sprintf("ryw-%d", i)
			written(t, "issue "+machine, testutil.Send(t, testutil.JSONCall(http.MethodPost, u+"/v1/tokens/member", admin, wire.IssueTokenRequest{Machine: machine})), http.StatusCreated)
			if !listed(machine) {
				t.Fatalf("GET /v1/tokens/member right after issuing %s does not list it", machine)
			}
			written(t, "revoke "+machine, testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: u + "/v1/tokens/member/" + machine, Auth: testutil.Bearer(admin)}), http.StatusNoContent)
			if listed(machine) {
				t.Fatalf("GET /v1/tokens/member right after revoking %s still lists it", machine)
			}
		}
	})
}

// TestServer_ForwardedWriteAnnouncesCommit runs a cluster whose leader, left
// alone, tells followers about commits only every 3–6 s (raft's commit
// timeout). A lease renewal or release forwarded by a follower must still be
// applied there within its 800 ms budget: the leader announces the commit of
// a forwarded write at once.
func TestServer_ForwardedWriteAnnouncesCommit(t *testing.T) {
	opts := clusterOptions()
	opts.CommitTimeout = 3 * time.Second
	opts.Sweep = time.Hour // no sweep entries carry the commit index meanwhile
	opts.EveryRenewalWrites = true
	c := startObserved(t, opts)
	fi := c.Follower()
	follower := c.Nodes[fi]
	memberToken := c.Tokens.Member
	l := acquire(t, c.Nodes[c.Leader()].URL, memberToken, wire.AcquireRequest{Machine: "announce", Purpose: "commit", TTLMs: memberTTL})
	applied := func(what string, r testutil.Reply, want int) {
		t.Helper()
		testutil.WantStatus(t, what, r, want)
		index := headerUint(t, r, wire.HeaderIndex)
		if got := follower.Node.FSM().AppliedIndex(); got < index {
			t.Fatalf("%s through the follower: answered with %s %d while the follower had applied only %d", what, wire.HeaderIndex, index, got)
		}
	}
	for i := range 5 {
		applied(fmt.Sprintf("renewal %d", i), testutil.Send(t, leaseCall(http.MethodPost, follower.URL, l.Port, memberToken, l.LeaseID)), http.StatusOK)
	}
	applied("release", testutil.Send(t, leaseCall(http.MethodDelete, follower.URL, l.Port, memberToken, l.LeaseID)), http.StatusNoContent)
	if got := c.reg.metric(t, fi, "elanous_forward_unapplied_total"); got != 0 {
		t.Errorf("elanous_forward_unapplied_total on the follower = %v, want 0", got)
	}
}
