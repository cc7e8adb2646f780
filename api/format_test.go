package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
)

// Every node reports the format level its build knows on /v1/health, and the
// leader, asking each over HTTP, raises the cluster to it.
func TestServer_FormatLevel(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	for _, n := range c.Nodes {
		var h struct {
			Status      string `json:"status"`
			Machine     string `json:"machine"`
			FormatLevel int    `json:"formatLevel"`
			// Progress, for the leader's membership maintenance (peers_test.go).
			AppliedIndex  uint64 `json:"appliedIndex"`
			LastContactMs *int64 `json:"lastContactMs"`
			// The last log entry, for fast failover's order of the survivors.
			LastLogTerm  *uint64 `json:"lastLogTerm"`
			LastLogIndex *uint64 `json:"lastLogIndex"`
		}
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/health"})
		testutil.WantStatus(t, "GET /v1/health", r, http.StatusOK)
		if err := testutil.StrictUnmarshal(r.Body, &h); err != nil {
			t.Fatalf("GET /v1/health = %s: %v", r, err)
		}
		if h.FormatLevel != fsm.MaxFormat || h.Machine != n.Machine || h.Status != "ok" {
			t.Errorf("GET /v1/health on %s = %+v, want status ok, its machine and format level %d", n.Machine, h, fsm.MaxFormat)
		}
	}
	c.WaitFor("every node at the newest format level", 10*time.Second, func() bool {
		for _, n := range c.Nodes {
			if n.Node.FSM().Format() != fsm.MaxFormat {
				return false
			}
		}
		return true
	})
}
