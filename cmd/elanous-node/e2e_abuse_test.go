package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestE2E_AuditFileAndLimits runs serve processes with log.audit_file and a
// write rate limit: an admin action forwarded by a follower is one line in
// the leader's audit file (the client's address, the admin token's
// fingerprint, never a token), a bad token one line in the file of the node
// that refused it (the follower, or the leader when the follower lagged and
// forwarded it); the cluster status carries the limits; a machine token
// past its write burst is 429 rate-limited with Retry-After.
func TestE2E_AuditFileAndLimits(t *testing.T) {
	c := newE2ECluster(t, 3)
	audit := map[string]string{}
	for _, nd := range c.nodes {
		audit[nd.id] = filepath.Join(nd.dir, "audit.jsonl")
		c.writeConfig(nd, func(doc map[string]any) {
			doc["log"] = map[string]any{"level": "info", "audit_file": audit[nd.id]}
			// One token every 100 s after a burst of 5: nothing refills
			// while the test runs.
			doc["limits"] = map[string]any{"write_rate": 0.01, "write_burst": 5}
		})
	}
	leader, _ := c.startAll()
	follower := c.running(leader)[0]

	r := testutil.Expect(t, e2eCall(http.MethodPost, follower.url+"/v1/tokens/member", c.tokens.Admin, map[string]any{"machine": "mbp"}), http.StatusCreated)
	issued := testutil.Decode[wire.IssuedToken](t, r)
	testutil.Expect(t, e2eCall(http.MethodGet, follower.url+"/v1/resources", strings.Repeat("0", 64), nil), http.StatusUnauthorized)

	st, err := c.getStatus(follower)
	if err != nil {
		t.Fatal(err)
	}
	if st.Limits == nil || st.Limits.Effective.ResourcesPerMachine != 1024 || st.Limits.Node == nil || st.Limits.Node.WriteBurst != 5 {
		t.Errorf("cluster status limits = %+v, want the default quotas and write_burst 5", st.Limits)
	}

	// A burst of 5 on the leader (the follower's issue above charged the
	// follower's address bucket, not the leader's).
	testutil.Expect(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/register", issued.Token, registerBody("machine:mbp", "mbp")), http.StatusOK)
	for range 4 {
		testutil.Expect(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/machine%3Ambp/heartbeat", issued.Token, nil), http.StatusOK)
	}
	r = testutil.Send(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/machine%3Ambp/heartbeat", issued.Token, nil))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Errorf("a write past the machine token's burst = %v (Retry-After %q), want 429 with Retry-After", r, r.Header.Get("Retry-After"))
	}

	lines := func(nd *e2eNode) []map[string]any {
		t.Helper()
		data, err := os.ReadFile(audit[nd.id])
		if err != nil {
			t.Fatalf("read %s's audit file: %v", nd.id, err)
		}
		for _, secret := range []string{c.tokens.Admin, c.tokens.Member, c.tokens.Query, issued.Token} {
			if strings.Contains(string(data), secret) {
				t.Errorf("%s's audit file holds a token:\n%s", nd.id, data)
			}
		}
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var m map[string]any
			if l != "" && json.Unmarshal([]byte(l), &m) == nil {
				out = append(out, m)
			}
		}
		return out
	}
	testutil.Poll(t, "the audit lines", 5*time.Second, func() error {
		var issues, fails []map[string]any
		for _, nd := range c.nodes {
			for _, l := range lines(nd) {
				switch l["action"] {
				case "token.issue":
					issues = append(issues, l)
				case "auth":
					fails = append(fails, l)
				}
			}
		}
		if len(issues) != 1 || issues[0]["machine"] != "mbp" || issues[0]["via"] != follower.id || issues[0]["node"] != leader.id ||
			!strings.HasPrefix(fmt.Sprint(issues[0]["remote"]), "127.0.0.1:") || issues[0]["audit"] != true {
			return fmt.Errorf("token issue lines %v, want one from %s forwarded by %s", issues, leader.id, follower.id)
		}
		// The follower refuses the bad token itself, or, if it lags a moment
		// after the issue it forwarded, lets the leader refuse it: one line.
		if len(fails) != 1 || fails[0]["outcome"] != wire.CodeUnauthorized || fails[0]["token"] == "" {
			return fmt.Errorf("authentication failure lines %v, want one", fails)
		}
		return nil
	})
	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}
