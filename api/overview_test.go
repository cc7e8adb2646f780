package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestClusterOverview asks a follower for the overview: every candidate
// answers with its own Raft view, one leads, lag is counted from the
// leader's last index, and a stopped candidate is listed unreachable with
// the reason while the others still answer.
func TestClusterOverview(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	f := c.Nodes[c.Follower()]
	leader := c.Nodes[c.Leader()]
	overview := func(token string) testutil.Reply {
		return testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: f.URL + "/v1/cluster/overview", Auth: testutil.Bearer(token)})
	}
	testutil.WantError(t, "overview without a token", overview(""), http.StatusUnauthorized, wire.CodeUnauthorized)

	c.WaitApplied()
	o := testutil.Decode[wire.ClusterOverview](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet,
		URL: f.URL + "/v1/cluster/overview", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))
	if o.ViewedFrom != f.Machine || o.Leader != leader.Machine || o.Primary.Holder != leader.Machine || o.Stale {
		t.Errorf("overview from %s = viewedFrom %q leader %q primary %+v stale %v, want %s, leader %s, not stale",
			f.Machine, o.ViewedFrom, o.Leader, o.Primary, o.Stale, f.Machine, leader.Machine)
	}
	if o.Band.Start == 0 || o.Band.End < o.Band.Start {
		t.Errorf("overview band = %+v, want the test band", o.Band)
	}
	if since := time.Since(time.UnixMilli(o.AsOf)); since < 0 || since > time.Minute {
		t.Errorf("overview asOf = %d, %s from now", o.AsOf, since)
	}
	if len(o.Candidates) != len(c.Nodes) {
		t.Fatalf("overview lists %d candidates, want %d: %+v", len(o.Candidates), len(c.Nodes), o.Candidates)
	}
	leaders := 0
	for _, cand := range o.Candidates {
		if !cand.Reachable || cand.Error != "" || cand.AppliedIndex == 0 || !cand.Voter || cand.Suffrage != "voter" || cand.URL == "" {
			t.Errorf("candidate %+v, want reachable, applied > 0, a voter with a URL", cand)
		}
		if cand.State == "Leader" {
			leaders++
			if cand.Machine != leader.Machine || cand.LastContactMs != 0 {
				t.Errorf("leader row %+v, want %s with last contact 0", cand, leader.Machine)
			}
		}
		if cand.Generation != o.Primary.Generation {
			t.Errorf("candidate %s at generation %d, want the primary's %d", cand.Machine, cand.Generation, o.Primary.Generation)
		}
	}
	if leaders != 1 {
		t.Errorf("overview has %d leaders, want 1: %+v", leaders, o.Candidates)
	}

	// A stopped follower is unreachable; the view still answers.
	other := -1
	for i := range c.Nodes {
		if i != c.Leader() && c.Nodes[i] != f {
			other = i
		}
	}
	c.StopNode(other)
	o = testutil.Decode[wire.ClusterOverview](t, testutil.Expect(t, testutil.Call{Method: http.MethodGet,
		URL: f.URL + "/v1/cluster/overview", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusOK))
	for _, cand := range o.Candidates {
		down := cand.Machine == c.Nodes[other].Machine
		if down && (cand.Reachable || !strings.Contains(cand.Error, "unreachable")) {
			t.Errorf("stopped candidate %+v, want unreachable with the reason", cand)
		}
		if !down && !cand.Reachable {
			t.Errorf("running candidate %+v listed unreachable", cand)
		}
	}
}
