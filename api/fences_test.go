package api_test

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// fenceCall is POST /v1/fences/check of port and fence through url.
func fenceCall(url, token string, port int, fence uint64) testutil.Call {
	return staleFenceCall(url, token, port, fence, "")
}

// staleFenceCall is fenceCall with a query string (say "?stale=true").
func staleFenceCall(url, token string, port int, fence uint64, query string) testutil.Call {
	return testutil.JSONCall(http.MethodPost, url+"/v1/fences/check"+query, token, wire.FenceCheckRequest{Port: port, Fence: fence})
}

// wantValid checks a fence check answered 200 for lease l.
func wantValid(t *testing.T, what string, r testutil.Reply, l wire.PortLease) {
	t.Helper()
	testutil.WantStatus(t, what, r, http.StatusOK)
	got := testutil.Decode[wire.FenceCheck](t, r)
	want := wire.FenceCheck{Valid: true, Port: l.Port, Fence: l.Fence, Generation: l.Generation, Machine: l.Machine, ExpiresAt: l.ExpiresAt}
	if got != want {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

// wantStale checks a fence check answered 409 stale-fence with current as
// its currentFence (0: none).
func wantStale(t *testing.T, what string, r testutil.Reply, current uint64) {
	t.Helper()
	testutil.WantStatus(t, what, r, http.StatusConflict)
	got := testutil.Decode[wire.StaleFence](t, r)
	if got.Error != wire.CodeStaleFence || got.Message == "" || got.CurrentFence != current {
		t.Errorf("%s = %+v, want error %q, a message and currentFence %d", what, got, wire.CodeStaleFence, current)
	}
}

// TestServer_FenceCheck covers POST /v1/fences/check through a follower
// (ARCHITECTURE.md, "Fences for downstream"): valid while held; stale after a
// release, after a TTL expiry, and for an older grant once the port is
// granted again; the linearizable default never calls valid a fence the
// leader has moved past; bad input; and valid across a leader stop. The
// subtests share one cluster and run in order; the last stops the leader.
func TestServer_FenceCheck(t *testing.T) {
	opts := clusterOptions()
	reg := make(registries, 3)
	opts.API = func(i int, d *api.Deps) {
		reg[i] = prometheus.NewRegistry()
		d.Registry = reg[i]
	}
	c := apitest.Start(t, opts)
	query, memberToken := c.Tokens.Query, c.Tokens.Member
	leader := c.Nodes[c.Leader()]
	follower := c.Nodes[c.Follower()]
	req := wire.AcquireRequest{Machine: "fenced", Purpose: "fence-check", TTLMs: memberTTL}

	t.Run("valid while held", func(t *testing.T) {
		l := acquire(t, leader.URL, memberToken, req)
		fi := slices.Index(c.Nodes, follower)
		forwards := reg.metric(t, fi, "elanous_forwards_total")
		r := testutil.Send(t, fenceCall(follower.URL, query, l.Port, l.Fence))
		wantValid(t, "check through the follower", r, l)
		// The follower confirmed with the leader and answered itself.
		if got := reg.metric(t, fi, "elanous_forwards_total"); got != forwards {
			t.Errorf("the follower forwarded the check (elanous_forwards_total %v -> %v), want it answered from its confirmed state", forwards, got)
		}
		if got := headerUint(t, r, wire.HeaderIndex); got < l.Fence {
			t.Errorf("%s = %d, want at least the grant's index %d", wire.HeaderIndex, got, l.Fence)
		}
		wantValid(t, "check on the leader", testutil.Send(t, fenceCall(leader.URL, query, l.Port, l.Fence)), l)
		// A fence above the live one was never granted on the port.
		wantStale(t, "check of a higher fence", testutil.Send(t, fenceCall(follower.URL, query, l.Port, l.Fence+1)), l.Fence)
		// ?stale answers from the follower's state once it has applied the grant.
		c.WaitApplied()
		wantValid(t, "stale check through the follower", testutil.Send(t, staleFenceCall(follower.URL, query, l.Port, l.Fence, "?stale=true")), l)
		releaseAll(t, c)
	})

	t.Run("stale after release", func(t *testing.T) {
		l := acquire(t, leader.URL, memberToken, req)
		testutil.Expect(t, leaseCall(http.MethodDelete, leader.URL, l.Port, memberToken, l.LeaseID), http.StatusNoContent)
		// At once, without waiting for the follower to apply the release:
		// the linearizable check must not answer from a state before it.
		wantStale(t, "check through the follower right after the release", testutil.Send(t, fenceCall(follower.URL, query, l.Port, l.Fence)), 0)
	})

	t.Run("stale after TTL expiry", func(t *testing.T) {
		short := req
		short.TTLMs = 300
		l := acquire(t, leader.URL, memberToken, short)
		testutil.Poll(t, "the fence to go stale once the TTL ran out", 10*time.Second, func() error {
			_, err := testutil.DoExpect(fenceCall(follower.URL, query, l.Port, l.Fence), http.StatusConflict)
			return err
		})
		wantStale(t, "check after expiry", testutil.Send(t, fenceCall(follower.URL, query, l.Port, l.Fence)), 0)
	})

	t.Run("stale for an older grant once granted again", func(t *testing.T) {
		first := acquire(t, leader.URL, memberToken, req)
		testutil.Expect(t, leaseCall(http.MethodDelete, leader.URL, first.Port, memberToken, first.LeaseID), http.StatusNoContent)
		second := acquire(t, leader.URL, memberToken, req)
		if second.Port != first.Port || second.Fence <= first.Fence {
			t.Fatalf("second grant port %d fence %d, want port %d again under a fence above %d", second.Port, second.Fence, first.Port, first.Fence)
		}
		wantStale(t, "check of the older grant", testutil.Send(t, fenceCall(follower.URL, query, first.Port, first.Fence)), second.Fence)
		wantValid(t, "check of the new grant", testutil.Send(t, fenceCall(follower.URL, query, second.Port, second.Fence)), second)
		releaseAll(t, c)
	})

	t.Run("bad input", func(t *testing.T) {
		l := acquire(t, leader.URL, memberToken, req)
		defer releaseAll(t, c)
		good := `{"port":` + strconv.Itoa(l.Port) + `,"fence":` + strconv.FormatUint(l.Fence, 10) + `}`
		path := follower.URL + "/v1/fences/check"
		for _, tc := range []struct {
			name, query, body string
			status            int
			code              string
		}{
			{"empty body", "", "", http.StatusBadRequest, wire.CodeInvalidRequest},
			{"not JSON", "", "port=1", http.StatusBadRequest, wire.CodeInvalidRequest},
			{"unknown field", "", `{"port":` + strconv.Itoa(l.Port) + `,"fence":1,"leaseId":"x"}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"trailing data", "", good + `{}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"string fence", "", `{"port":` + strconv.Itoa(l.Port) + `,"fence":"1"}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"negative fence", "", `{"port":` + strconv.Itoa(l.Port) + `,"fence":-1}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"no fence", "", `{"port":` + strconv.Itoa(l.Port) + `}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"no port", "", `{"fence":1}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"port out of range", "", `{"port":65536,"fence":1}`, http.StatusBadRequest, wire.CodeInvalidRequest},
			{"bad stale flag", "?stale=maybe", good, http.StatusBadRequest, wire.CodeInvalidRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: path + tc.query, Auth: testutil.Bearer(query), Body: tc.body, ContentType: "application/json"})
				testutil.WantError(t, "check with "+tc.name, r, tc.status, tc.code)
			})
		}
		r := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: path, Body: good, ContentType: "application/json"})
		testutil.WantError(t, "check without a token", r, http.StatusUnauthorized, wire.CodeUnauthorized)
		r = testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: path, Auth: testutil.Bearer(testutil.RandomToken()), Body: good, ContentType: "application/json"})
		testutil.WantError(t, "check with an unknown token", r, http.StatusUnauthorized, wire.CodeUnauthorized)
		other := issueToken(t, c, leader.URL, "another-machine")
		c.WaitApplied() // the follower knows the new token
		r = testutil.Send(t, fenceCall(follower.URL, other.Token, l.Port, l.Fence))
		testutil.WantError(t, "check with another machine's token", r, http.StatusForbidden, wire.CodeForbidden)
		r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: path, Auth: testutil.Bearer(query)})
		testutil.WantError(t, "GET of the check", r, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed)
		// None of it changed the lease.
		wantValid(t, "check after the bad input", testutil.Send(t, fenceCall(follower.URL, query, l.Port, l.Fence)), l)
	})

	t.Run("member client and guard", func(t *testing.T) {
		mc, err := member.NewClient(member.ClientConfig{URL: follower.URL, Token: query})
		if err != nil {
			t.Fatalf("NewClient() error = %v", err)
		}
		var guard member.Guard
		first := acquire(t, leader.URL, memberToken, req)
		check, err := guard.Confirm(t.Context(), mc, "store", first.Port, first.Fence)
		if err != nil || check.Fence != first.Fence || check.Machine != first.Machine {
			t.Fatalf("Confirm(held fence) = %+v, %v, want the grant's check", check, err)
		}
		testutil.Expect(t, leaseCall(http.MethodDelete, leader.URL, first.Port, memberToken, first.LeaseID), http.StatusNoContent)
		second := acquire(t, leader.URL, memberToken, req)
		// The guard has not seen the new grant: the cluster refuses the old fence.
		_, err = guard.Confirm(t.Context(), mc, "store", first.Port, first.Fence)
		var stale *member.StaleFenceError
		if !errors.As(err, &stale) || stale.Current != second.Fence || member.StatusCode(err) != http.StatusConflict {
			t.Fatalf("Confirm(old fence) error = %v, want a 409 *StaleFenceError with Current %d", err, second.Fence)
		}
		if got := guard.Highest("store"); got != second.Fence {
			t.Errorf("Highest() = %d, want the cluster's current fence %d", got, second.Fence)
		}
		if err := guard.Admit("store", first.Fence); !errors.Is(err, member.ErrStaleFence) {
			t.Errorf("Admit(old fence) error = %v, want ErrStaleFence without a round trip", err)
		}
		if _, err := mc.CheckFence(t.Context(), second.Port, second.Fence); err != nil {
			t.Errorf("CheckFence(new fence) error = %v", err)
		}
		releaseAll(t, c)
	})

	t.Run("valid across a leader stop", func(t *testing.T) {
		l := acquire(t, leader.URL, memberToken, req)
		c.WaitApplied()
		li := c.Leader()
		c.StopNode(li)
		next := c.Nodes[c.Leader()]
		if next == c.Nodes[li] {
			t.Fatalf("the stopped node %s still leads", next.Machine)
		}
		// The new leader's claim rebased the TTL: same fence, a later expiry.
		var through *apitest.Node
		for _, n := range c.Nodes {
			if n != c.Nodes[li] && n != next {
				through = n
			}
		}
		r := testutil.Send(t, fenceCall(through.URL, query, l.Port, l.Fence))
		testutil.WantStatus(t, "check through the remaining follower", r, http.StatusOK)
		got := testutil.Decode[wire.FenceCheck](t, r)
		if !got.Valid || got.Port != l.Port || got.Fence != l.Fence || got.Machine != l.Machine || got.ExpiresAt < l.ExpiresAt {
			t.Errorf("check after failover = %+v, want the same grant (port %d, fence %d) expiring no earlier than %d", got, l.Port, l.Fence, l.ExpiresAt)
		}
	})
}
