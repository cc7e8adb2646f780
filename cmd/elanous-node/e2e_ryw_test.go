package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/elanous/elanous-node/api/wire"
)

// TestE2E_ReadYourWritesThroughFollower writes through a follower of three
// real processes and reads every write back from that same follower at once
// with a default (local, not consistent) read: register, delete, acquire,
// release, token issue and revoke, 100 times each. Every read must see its
// write: a candidate answers a write it forwarded only once it has applied it.
func TestE2E_ReadYourWritesThroughFollower(t *testing.T) {
	const rounds = 100
	c := newE2ECluster(t, 3)
	leader, primary := c.startAll()
	follower := c.running(leader)[0]
	t.Logf("leader %s (generation %d); writing and reading through follower %s", leader.id, primary.Generation, follower.id)
	u, member, admin, query := follower.url, c.tokens.Member, c.tokens.Admin, c.tokens.Query

	seen := map[string]int{}
	ops := []string{"register", "delete", "acquire", "release", "issue", "revoke"}
	// read performs the default read that follows a write; it answers 200
	// or 404.
	read := func(path, token string) response {
		r, err := call(http.MethodGet, u+path, token, nil)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, follower.id, err)
		}
		if r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Fatalf("GET %s on %s = %v", path, follower.id, r)
		}
		return r
	}
	tokenListed := func(machine string) bool {
		r := read("/v1/tokens/member", admin)
		var list []wire.TokenInfo
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatalf("GET /v1/tokens/member on %s: decode %q: %v", follower.id, r.body, err)
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
		path := "/v1/resources/" + encodeURIComponent(id)

		mustCall(t, http.StatusOK, nil, http.MethodPost, u+"/v1/resources/register", member, registerBody(id, machine))
		if read(path, query).status == http.StatusOK {
			seen["register"]++
		}
		mustCall(t, http.StatusNoContent, nil, http.MethodDelete, u+path, member, nil)
		if read(path, query).status == http.StatusNotFound {
			seen["delete"]++
		}

		var l wire.PortLease
		mustCall(t, http.StatusCreated, &l, http.MethodPost, u+"/v1/leases/port", member, acquireBody(machine, "ryw"))
		leasePath := "/v1/leases/port/" + strconv.Itoa(l.Port)
		if r := read(leasePath, query); r.status == http.StatusOK {
			var got wire.PortLease
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("GET %s: decode %q: %v", leasePath, r.body, err)
			}
			if got.LeaseID == l.LeaseID {
				seen["acquire"]++
			}
		}
		mustCall(t, http.StatusNoContent, nil, http.MethodDelete, u+leasePath, member, nil, wire.HeaderPortLeaseID, l.LeaseID)
		if read(leasePath, query).status == http.StatusNotFound {
			seen["release"]++
		}

		mustCall(t, http.StatusCreated, nil, http.MethodPost, u+"/v1/tokens/member", admin, wire.IssueTokenRequest{Machine: machine})
		if tokenListed(machine) {
			seen["issue"]++
		}
		mustCall(t, http.StatusNoContent, nil, http.MethodDelete, u+"/v1/tokens/member/"+machine, admin, nil)
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
	c.checkLogs(leader.proc, follower.proc)
}
