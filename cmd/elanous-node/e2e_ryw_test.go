package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// TestE2E_ReadYourWritesThroughFollower writes through a follower of three
// real processes and reads every write back from that same follower at once
// with a default (local, not consistent) read: register, delete, acquire,
// release, token issue and revoke, 100 times each. Every read must see its
// write: a candidate answers a write it forwarded only once it has applied it.
// The node must have stayed a follower throughout (the same holder and
// generation at the end as at the start), or the reads were the leader's and
// proved nothing about forwarding.
//
// The cluster runs with longer Raft timings than the other end-to-end tests
// (ryWTimings): this test measures no failover, and a leader that steps down
// because a loaded machine stalled its heartbeats past the e2e clusters' 150
// ms lease would fail a write in flight with 503 outcome-unknown, which is
// right for the node and no finding about read-your-writes.
func TestE2E_ReadYourWritesThroughFollower(t *testing.T) {
	const rounds = 100
	c := newE2ECluster(t, 3)
	for _, nd := range c.nodes {
		c.writeConfig(nd, ryWTimings)
	}
	leader, primary := c.startAll()
	follower := c.running(leader)[0]
	t.Logf("leader %s (generation %d); writing and reading through follower %s", leader.id, primary.Generation, follower.id)
	u, memberToken, admin, query := follower.url, c.tokens.Member, c.tokens.Admin, c.tokens.Query

	seen := map[string]int{}
	ops := []string{"register", "delete", "acquire", "release", "issue", "revoke"}
	// read performs the default read that follows a write; it answers 200
	// or 404.
	read := func(path, token string) testutil.Reply {
		r, err := testutil.Do(e2eCall(http.MethodGet, u+path, token, nil))
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, follower.id, err)
		}
		if r.Status != http.StatusOK && r.Status != http.StatusNotFound {
			t.Fatalf("GET %s on %s = %v", path, follower.id, r)
		}
		return r
	}
	tokenListed := func(machine string) bool {
		r := read("/v1/tokens/member", admin)
		var list []wire.TokenInfo
		if err := json.Unmarshal(r.Body, &list); err != nil {
			t.Fatalf("GET /v1/tokens/member on %s: decode %q: %v", follower.id, r.Body, err)
		}
		for _, ti := range list {
			if ti.Machine == machine {
				return true
			}
		}
		return false
	}

	for i := range rounds {
		machine := fmt.Sprintf("ryw-%d", i)
		id := "machine:" + machine
		path := "/v1/resources/" + member.EscapeID(id)

		testutil.Expect(t, e2eCall(http.MethodPost, u+"/v1/resources/register", memberToken, registerBody(id, machine)), http.StatusOK)
		if read(path, query).Status == http.StatusOK {
			seen["register"]++
		}
		testutil.Expect(t, e2eCall(http.MethodDelete, u+path, memberToken, nil), http.StatusNoContent)
		if read(path, query).Status == http.StatusNotFound {
			seen["delete"]++
		}

		l := testutil.Decode[wire.PortLease](t, testutil.Expect(t,
			e2eCall(http.MethodPost, u+"/v1/leases/port", memberToken, acquireBody(machine, "ryw")), http.StatusCreated))
		leasePath := "/v1/leases/port/" + strconv.Itoa(l.Port)
		if r := read(leasePath, query); r.Status == http.StatusOK {
			var got wire.PortLease
			if err := json.Unmarshal(r.Body, &got); err != nil {
				t.Fatalf("GET %s: decode %q: %v", leasePath, r.Body, err)
			}
			if got.LeaseID == l.LeaseID {
				seen["acquire"]++
			}
		}
		testutil.Expect(t, e2eCall(http.MethodDelete, u+leasePath, memberToken, nil).WithHeader(wire.HeaderPortLeaseID, l.LeaseID), http.StatusNoContent)
		if read(leasePath, query).Status == http.StatusNotFound {
			seen["release"]++
		}

		testutil.Expect(t, e2eCall(http.MethodPost, u+"/v1/tokens/member", admin, wire.IssueTokenRequest{Machine: machine}), http.StatusCreated)
		if tokenListed(machine) {
			seen["issue"]++
		}
		testutil.Expect(t, e2eCall(http.MethodDelete, u+"/v1/tokens/member/"+machine, admin, nil), http.StatusNoContent)
		if !tokenListed(machine) {
			seen["revoke"]++
		}
	}
	for _, op := range ops {
		t.Logf("%s through %s, then a default read on %s: seen %d/%d", op, follower.id, follower.id, seen[op], rounds)
		if seen[op] != rounds {
			t.Errorf("%s: the read right after it on the same follower saw it %d times out of %d, want every time", op, seen[op], rounds)
		}
	}
	// A claim of any later generation, even one that went back to the same
	// leader, would show here: the generation is the claim's term.
	end, err := getPrimary(follower.url)
	if err != nil {
		t.Fatalf("GET /v1/primary on %s after the writes: %v", follower.id, err)
	}
	if end.Holder != primary.Holder || end.Generation != primary.Generation || end.Holder == follower.id {
		t.Errorf("/v1/primary on %s after the writes = holder %s generation %d, want %s generation %d as at the start: leadership moved, so %s may not have been a follower throughout",
			follower.id, end.Holder, end.Generation, primary.Holder, primary.Generation, follower.id)
	}
	c.checkLogs(leader.proc, follower.proc)
}

// ryWTimings sets Raft timings with room for a stalled machine: 1 s heartbeat
// and election timeouts, a 500 ms leader lease (the product defaults are 500,
// 500 and 250 ms).
func ryWTimings(doc map[string]any) {
	r := doc["raft"].(map[string]any)
	r["heartbeat_timeout"], r["election_timeout"], r["leader_lease_timeout"] = "1s", "1s", "500ms"
}
