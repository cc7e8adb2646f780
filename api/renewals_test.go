package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// Renewals through any node: the first renewal of a fresh record is a write
// (with slack, so it carries X-Elanous-Index); the next ones are answered
// from confirmed state with no log entry and no index, promise at least
// now + TTL, and leave renewedAt and revision where the last write put them.
// Refusals stay as they were: 404, 409.
func TestServer_RenewalsWithoutEntry(t *testing.T) {
	c := startObserved(t, apitest.Options{Timeout: 500 * time.Millisecond, Sweep: time.Hour})
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	const ttl = 60_000
	testutil.Expect(t, registerCall(follower.URL, c.Tokens.Member, "mbp", "machine:mbp", "machine", ttl), http.StatusOK)
	lease := acquire(t, follower.URL, c.Tokens.Member, wire.AcquireRequest{Machine: "mbp", Purpose: "renewals", TTLMs: ttl})

	waitClockPast(t, leader)
	first := testutil.Expect(t, heartbeatCall(follower.URL, c.Tokens.Member, "machine%3Ambp"), http.StatusOK)
	if first.Header.Get(wire.HeaderIndex) == "" {
		t.Fatalf("first heartbeat of a fresh record has no %s: it needs a write", wire.HeaderIndex)
	}
	waitClockPast(t, leader)
	testutil.Expect(t, leaseCall(http.MethodPost, follower.URL, lease.Port, c.Tokens.Member, lease.LeaseID), http.StatusOK)
	c.WaitApplied()
	stored := testutil.Decode[wire.Resource](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet,
		URL: leader.URL + "/v1/resources/machine%3Ambp", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))

	raft := leader.Node.Raft()
	last := raft.LastIndex()
	for i := 0; i < 20; i++ {
		for _, via := range []*apitest.Node{leader, follower} {
			before := time.Now().UnixMilli()
			r := testutil.Expect(t, heartbeatCall(via.URL, c.Tokens.Member, "machine%3Ambp"), http.StatusOK)
			if got := r.Header.Get(wire.HeaderIndex); got != "" {
				t.Fatalf("covered heartbeat %d via %s carries %s %s: it wrote", i, via.Machine, wire.HeaderIndex, got)
			}
			hb := testutil.Decode[wire.HeartbeatResponse](t, r)
			if hb.ID != "machine:mbp" || hb.ExpiresAt < before+ttl || hb.ExpiresAt != stored.ExpiresAt {
				t.Fatalf("covered heartbeat %d via %s = %+v, want the stored expiry %d (≥ now + TTL %d)", i, via.Machine, hb, stored.ExpiresAt, before+ttl)
			}
			lr := testutil.Decode[wire.LeaseHeartbeatResponse](t, testutil.Expect(t,
				leaseCall(http.MethodPost, via.URL, lease.Port, c.Tokens.Member, lease.LeaseID), http.StatusOK))
			if lr.Port != lease.Port || lr.LeaseID != lease.LeaseID || lr.ExpiresAt < before+ttl {
				t.Fatalf("covered lease renewal %d via %s = %+v, want port %d, its lease id, expiry ≥ %d", i, via.Machine, lr, lease.Port, before+ttl)
			}
		}
	}
	if got := raft.LastIndex(); got != last {
		t.Errorf("the leader's log grew from %d to %d during 80 covered renewals", last, got)
	}
	again := testutil.Decode[wire.Resource](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet,
		URL: follower.URL + "/v1/resources/machine%3Ambp", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))
	if again.RenewedAt != stored.RenewedAt || again.Revision != stored.Revision {
		t.Errorf("covered renewals moved renewedAt %d → %d, revision %d → %d; they write nothing", stored.RenewedAt, again.RenewedAt, stored.Revision, again.Revision)
	}
	if got := c.reg.metric(t, fi, "elanous_renewals_total", "outcome", "covered"); got < 40 {
		t.Errorf("the follower counted %v covered renewals, want at least 40", got)
	}

	// Refusals, on both nodes: 404 unknown id, 409 another lease id.
	for _, via := range []*apitest.Node{leader, follower} {
		testutil.WantError(t, "heartbeat of an unknown id via "+via.Machine,
			testutil.Send(t, heartbeatCall(via.URL, c.Tokens.Member, "machine%3Anope")), http.StatusNotFound, wire.CodeNotFound)
		testutil.WantError(t, "renewal under another lease id via "+via.Machine,
			testutil.Send(t, leaseCall(http.MethodPost, via.URL, lease.Port, c.Tokens.Member, "00000000-0000-0000-0000-000000000000")),
			http.StatusConflict, wire.CodeLeaseMismatch)
	}
	if got := raft.LastIndex(); got != last {
		t.Errorf("refused renewals grew the leader's log from %d to %d", last, got)
	}

	// A heartbeat whose attrs change the record is a write, through the follower too.
	r := testutil.Expect(t, testutil.JSONCall(http.MethodPost, follower.URL+"/v1/resources/machine%3Ambp/heartbeat", c.Tokens.Member,
		wire.HeartbeatRequest{Attrs: map[string]json.RawMessage{"load": json.RawMessage(`0.7`)}}), http.StatusOK)
	if r.Header.Get(wire.HeaderIndex) == "" {
		t.Errorf("heartbeat with new attrs through the follower carries no %s: it must be a write", wire.HeaderIndex)
	}
}

// With EveryRenewalWrites (ttl.renew_slack 0) every renewal is a log entry.
func TestServer_RenewalsSlackOff(t *testing.T) {
	c := apitest.Start(t, apitest.Options{Timeout: 500 * time.Millisecond, Sweep: time.Hour, EveryRenewalWrites: true})
	follower := c.Nodes[c.Follower()]
	testutil.Expect(t, registerCall(follower.URL, c.Tokens.Member, "mbp", "machine:mbp", "machine", 60_000), http.StatusOK)
	var prev uint64
	for i := 0; i < 5; i++ {
		r := testutil.Expect(t, heartbeatCall(follower.URL, c.Tokens.Member, "machine%3Ambp"), http.StatusOK)
		index := headerUint(t, r, wire.HeaderIndex)
		if index <= prev {
			t.Fatalf("heartbeat %d with the slack off: index %d, want above %d", i, index, prev)
		}
		prev = index
	}
}

// POST /v1/cluster/confirm needs a token, decodes strictly, and is the
// leader's answer through any node.
func TestServer_Confirm(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	leader, follower := c.Nodes[c.Leader()], c.Nodes[c.Follower()]
	call := func(url, token, body string) testutil.Call {
		return testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/confirm", Auth: testutil.Bearer(token), Body: body, ContentType: "application/json"}
	}
	r := testutil.Expect(t, call(leader.URL, c.Tokens.Query, `{}`), http.StatusOK)
	conf := testutil.Decode[wire.ConfirmResponse](t, r)
	if conf.Index == 0 || conf.Term == 0 || conf.Now == 0 {
		t.Errorf("confirm on the leader = %+v, want index, term and time", conf)
	}
	testutil.WantStatus(t, "confirm without a token", testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: leader.URL + "/v1/cluster/confirm"}), http.StatusUnauthorized)
	testutil.WantError(t, "confirm with an unknown field", testutil.Send(t, call(leader.URL, c.Tokens.Query, `{"x":1}`)), http.StatusBadRequest, wire.CodeInvalidRequest)
	via := testutil.Decode[wire.ConfirmResponse](t, testutil.Expect(t, call(follower.URL, c.Tokens.Query, `{}`), http.StatusOK))
	if via.Term != conf.Term || via.Index < conf.Index || via.Now < conf.Now {
		t.Errorf("confirm through a follower = %+v, want the leader's (term %d, index ≥ %d, now ≥ %d)", via, conf.Term, conf.Index, conf.Now)
	}
}

// waitClockPast waits until the wall clock, which the leader's cluster time
// follows in this process, is a few milliseconds past the last applied time:
// a renewal judged in the millisecond of its record's write is covered by
// the record's own now + TTL and writes nothing.
func waitClockPast(t *testing.T, leader *apitest.Node) {
	t.Helper()
	testutil.WaitFor(t, "the clock past the last applied time", time.Second, func() bool {
		return time.Now().UnixMilli() > leader.Node.FSM().LastNow()+2
	})
}
