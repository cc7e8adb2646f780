package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// checkFenceCLI runs `lease check` for lease l's port and fence with the
// query token (and --json when asJSON), and returns what it printed.
func (c *e2eCluster) checkFenceCLI(port int, fence uint64, asJSON bool) cliResult {
	c.t.Helper()
	args := []string{"lease", "check", "--port", strconv.Itoa(port), "--fence", strconv.FormatUint(fence, 10)}
	if asJSON {
		args = append(args, "--json")
	}
	return c.client(c.tokens.Query, args...)
}

// verdictOf decodes the --json line of `lease check`.
func verdictOf(t *testing.T, r cliResult) fenceVerdict {
	t.Helper()
	var v fenceVerdict
	if err := testutil.StrictUnmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("lease check --json printed %q: %v\n%s", r.stdout, err, r)
	}
	return v
}

// TestE2E_FenceCheck: on real processes, a grant's fence is valid through a
// follower and through `lease check` while the lease is held, stays valid
// across a SIGKILL of the leader, and is stale once released and once the
// port is granted again (exit 1, the current fence reported); bad input is
// 400 / 401 over HTTP and exit 2 from the CLI (ARCHITECTURE.md, "Fences for
// downstream").
func TestE2E_FenceCheck(t *testing.T) {
	c, leader, before := startE2ECluster(t)
	follower := c.running(leader)[0]
	check := func(nd *e2eNode, port int, fence uint64) testutil.Call {
		return e2eCall(http.MethodPost, nd.url+"/v1/fences/check", c.tokens.Query, wire.FenceCheckRequest{Port: port, Fence: fence})
	}

	r := testutil.Send(t, e2eCall(http.MethodPost, follower.url+"/v1/leases/port", c.tokens.Member, acquireBody("fenced", "e2e-fence")))
	testutil.WantStatus(t, "acquire through "+follower.id, r, http.StatusCreated)
	l := testutil.Decode[wire.PortLease](t, r)

	r = testutil.Send(t, check(follower, l.Port, l.Fence))
	testutil.WantStatus(t, "check through "+follower.id, r, http.StatusOK)
	if got := testutil.Decode[wire.FenceCheck](t, r); !got.Valid || got.Fence != l.Fence || got.Machine != "fenced" || got.ExpiresAt != l.ExpiresAt {
		t.Fatalf("check = %+v, want valid for fence %d of machine fenced expiring %d", got, l.Fence, l.ExpiresAt)
	}
	res := c.checkFenceCLI(l.Port, l.Fence, false)
	if res.code != 0 || !strings.Contains(res.stdout, "is valid") {
		t.Fatalf("lease check of the held fence: %s, want exit 0 and \"is valid\"", res)
	}

	// Bad input.
	bad := e2eCall(http.MethodPost, follower.url+"/v1/fences/check", c.tokens.Query, nil)
	bad.Body, bad.ContentType = `{"port":`+strconv.Itoa(l.Port)+`,"fence":"x"}`, "application/json"
	testutil.WantError(t, "check with a string fence", testutil.Send(t, bad), http.StatusBadRequest, wire.CodeInvalidRequest)
	anon := check(follower, l.Port, l.Fence)
	anon.Auth = ""
	testutil.WantError(t, "check without a token", testutil.Send(t, anon), http.StatusUnauthorized, wire.CodeUnauthorized)
	if res := c.checkFenceCLI(l.Port, 0, false); res.code != exitFenceError || !strings.Contains(res.stderr, "--fence") {
		t.Errorf("lease check --fence 0: %s, want exit 2 naming --fence", res)
	}
	if res := runBin(t, nil, "lease", "check", "--port", strconv.Itoa(l.Port), "--fence", "1", "--candidates", c.cliCandidates()); res.code != exitFenceError {
		t.Errorf("lease check without a token: %s, want exit 2", res)
	}

	// SIGKILL the leader: the fence stays valid through the survivors.
	leader.proc.kill(t)
	next, after := c.waitPrimary(leader, before.Generation, 20*time.Second)
	t.Logf("leader %s killed; %s leads generation %d", leader.id, next.id, after.Generation)
	for _, nd := range c.running(leader) {
		r = testutil.Send(t, check(nd, l.Port, l.Fence))
		testutil.WantStatus(t, "check through "+nd.id+" after the kill", r, http.StatusOK)
		if got := testutil.Decode[wire.FenceCheck](t, r); got.Fence != l.Fence || got.Generation != l.Generation || got.ExpiresAt < l.ExpiresAt {
			t.Errorf("check through %s after the kill = %+v, want fence %d of generation %d expiring no earlier than %d", nd.id, got, l.Fence, l.Generation, l.ExpiresAt)
		}
	}
	res = c.checkFenceCLI(l.Port, l.Fence, true)
	if v := verdictOf(t, res); res.code != 0 || !v.Valid || v.Fence != l.Fence || v.Machine != "fenced" {
		t.Fatalf("lease check --json after the kill: %s, want exit 0 and a valid verdict", res)
	}

	// Released: stale, with no current fence; granted again: stale, with it.
	survivor := c.running(leader, next)[0]
	release := e2eCall(http.MethodDelete, survivor.url+"/v1/leases/port/"+strconv.Itoa(l.Port), c.tokens.Member, nil).WithHeader(wire.HeaderPortLeaseID, l.LeaseID)
	testutil.WantStatus(t, "release through "+survivor.id, testutil.Send(t, release), http.StatusNoContent)
	res = c.checkFenceCLI(l.Port, l.Fence, false)
	if res.code != exitFenceStale || !strings.Contains(res.stderr, "is stale") || !strings.Contains(res.stderr, "no live lease") {
		t.Errorf("lease check after the release: %s, want exit 1 saying the port has no live lease", res)
	}
	r = testutil.Send(t, e2eCall(http.MethodPost, survivor.url+"/v1/leases/port", c.tokens.Member, acquireBody("fenced", "e2e-fence-2")))
	testutil.WantStatus(t, "acquire again", r, http.StatusCreated)
	again := testutil.Decode[wire.PortLease](t, r)
	if again.Port != l.Port || again.Fence <= l.Fence {
		t.Fatalf("second grant port %d fence %d, want port %d under a fence above %d", again.Port, again.Fence, l.Port, l.Fence)
	}
	res = c.checkFenceCLI(l.Port, l.Fence, true)
	if v := verdictOf(t, res); res.code != exitFenceStale || v.Valid || v.CurrentFence != again.Fence || v.Reason == "" {
		t.Errorf("lease check --json of the old fence: %s, want exit 1 with currentFence %d", res, again.Fence)
	}
	r = testutil.Send(t, check(survivor, l.Port, l.Fence))
	testutil.WantStatus(t, "check of the old fence", r, http.StatusConflict)
	var stale wire.StaleFence
	if err := json.Unmarshal(r.Body, &stale); err != nil || stale.Error != wire.CodeStaleFence || stale.CurrentFence != again.Fence {
		t.Errorf("409 body %s, want stale-fence with currentFence %d", r.Body, again.Fence)
	}
	c.checkLogs(c.nodes[0].proc, c.nodes[1].proc, c.nodes[2].proc)
}
