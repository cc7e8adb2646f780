package abuse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
)

// The abuse run against a real loopback cluster (the suite's scenario,
// smaller, and with a write rate limit of 20/s so that its smaller flood
// drains the buckets): the members lose nothing, the abusers get only the
// refusals they may get, and every limit bites. Each party dials from its
// own loopback address, as the scenario's do from their own IPs.
func TestRun_LoopbackCluster(t *testing.T) {
	c := apitest.Start(t, apitest.Options{Timeout: 300 * time.Millisecond, API: func(_ int, d *api.Deps) { d.Caps = api.Caps{WriteRate: 20, WriteBurst: 40} }})
	for _, n := range c.Nodes {
		c.WaitFor(n.Machine+" at format 2", 10*time.Second, func() bool { return n.Node.FSM().Format() >= 2 })
	}
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, n.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{
		Targets: targets, AdminToken: c.Tokens.Admin,
		MemberAddr: "127.0.0.2", AbuserAddr: "127.0.0.3", AnonymousAddr: "127.0.0.4",
		Members: 3, BlockingQueries: 400, AbuseRate: 400, AnonymousRate: 100, ResourcesPerMachine: 40,
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	t.Logf("report:\n%s", strings.Join(rep.Summary(), "\n"))
	if v := rep.Violations(); len(v) > 0 {
		t.Errorf("Violations() = \n%s", strings.Join(v, "\n"))
	}
	if rep.MemberOps == 0 || rep.GrantedResources == 0 || len(rep.Series) != len(targets) {
		t.Errorf("the run did too little: %+v", rep)
	}
}
