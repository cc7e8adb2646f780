package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/wire"
)

// Every abusive request, sent one at a time to a real loopback cluster
// (without write rate limits, so no answer depends on timing), gets one of
// the refusals its kind may get, and the quotas refuse what is past them:
// the requests are well formed and the scenario's allowed answers are the
// cluster's. The concurrent run is the fault suite's abuse scenario.
func TestAbuse_EachRequestGetsItsRefusal(t *testing.T) {
	c := apitest.Start(t, apitest.Options{Timeout: time.Second})
	for _, n := range c.Nodes {
		c.WaitFor(n.Machine+" at format 2", 20*time.Second, func() bool { return n.Node.FSM().Format() >= 2 })
	}
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, n.URL)
	}
	ctx := context.Background()
	r := newRun(Config{Targets: targets, AdminToken: c.Tokens.Admin})
	admin := newClient("", 5*time.Second, 0)
	if _, err := r.retry(ctx, admin, http.MethodPut, "/v1/cluster/limits", c.Tokens.Admin, wire.Limits{ResourcesPerMachine: 2, LeasesPerMachine: 2}, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	token, err := r.issue(ctx, admin, "abuser")
	if err != nil {
		t.Fatal(err)
	}
	memberToken, err := r.issue(ctx, admin, "good-0")
	if err != nil {
		t.Fatal(err)
	}
	m := &goodMember{r: r, machine: "good-0", token: memberToken, c: newClient("", 5*time.Second, 0)}
	if err := m.setUp(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied()

	cl := newClient("", 5*time.Second, 0)
	rng := mrand.New(mrand.NewPCG(1, 2))
	attrs := map[string]json.RawMessage{"blob": json.RawMessage(`"x"`)}
	var seq atomic.Int64
	for _, k := range abuseKinds {
		for range 3 {
			r.count(k.kind, r.abuse(ctx, cl, token, k.kind, rng, attrs, &seq))
		}
	}
	for _, kind := range []string{"anonymous random token", "anonymous random method"} {
		for range 6 {
			r.count(kind, r.anonymous(ctx, cl, kind))
		}
	}
	rep := r.report
	for kind, outcomes := range rep.Outcomes {
		for outcome, n := range outcomes {
			if !allowedOutcomes[kind][outcome] {
				t.Errorf("%s answered %q %d times, outside its allowed answers", kind, outcome, n)
			}
		}
	}
	for kind, want := range map[string][]string{
		"abuser register":         {"200", "200", "429 quota-exceeded"},
		"abuser acquire":          {"201", "201", "429 quota-exceeded"},
		"abuser acquire other":    {"403 forbidden", "403 forbidden", "403 forbidden"},
		"abuser random heartbeat": {"404 not-found", "404 not-found", "404 not-found"},
		"abuser squat register":   {"403 forbidden", "403 forbidden", "403 forbidden"},
		"abuser squat heartbeat":  {"403 forbidden", "403 forbidden", "403 forbidden"},
		"abuser squat delete":     {"403 forbidden", "403 forbidden", "403 forbidden"},
		"abuser squat release":    {"403 forbidden", "403 forbidden", "403 forbidden"},
		"anonymous random token":  {"401 unauthorized", "401 unauthorized", "401 unauthorized", "401 unauthorized", "401 unauthorized", "401 unauthorized"},
	} {
		var got []string
		for outcome, n := range rep.Outcomes[kind] {
			for range n {
				got = append(got, outcome)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s answered %v, want %v", kind, got, want)
		}
	}
	if n := len(r.granted); n != 2 {
		t.Errorf("the abuser holds %d resources, want the quota of 2", n)
	}
	// The members still hold what they held.
	m.verify(ctx)
	if len(r.report.Lost) > 0 {
		t.Errorf("the member lost %v", r.report.Lost)
	}
}

func TestReport_Violations(t *testing.T) {
	clean := func() *Report {
		return &Report{
			Outcomes: map[string]map[string]int{
				"abuser register":          {"200": 300, "429 quota-exceeded": 5, "429 rate-limited": 9},
				"abuser acquire":           {"201": 12, "429 quota-exceeded": 3},
				"abuser squat register":    {"403 forbidden": 4},
				"anonymous blocking query": {"429 rate-limited": 100, "transport": 7},
			},
			GrantedResources: 300, GrantedLeases: 12, Quota: wire.Limits{ResourcesPerMachine: 300, LeasesPerMachine: 12},
			BlockingCap: 64, MaxBlocking: map[string]int{"a": 68}, Series: map[string]int{"a": 40},
		}
	}
	if v := clean().Violations(); len(v) > 0 {
		t.Errorf("Violations() of a clean report = %v, want none", v)
	}
	tests := []struct {
		name string
		edit func(r *Report)
		want string
	}{
		{"a member lost a lease", func(r *Report) { r.Lost = []string{"lease on port 31450 of good-0"} }, "member lost lease on port 31450"},
		{"a squat succeeded", func(r *Report) { r.Outcomes["abuser squat register"]["200"] = 1 }, `abuser squat register answered "200" 1 times`},
		{"a 5xx", func(r *Report) { r.Outcomes["abuser register"]["503 no-leader"] = 2 }, `abuser register answered "503 no-leader" 2 times`},
		{"past the resource quota", func(r *Report) { r.GrantedResources = 301 }, "holds 301 resources, past the quota of 300"},
		{"past the lease quota", func(r *Report) { r.GrantedLeases = 13 }, "got 13 leases, past the quota of 12"},
		{"a quota never bit", func(r *Report) { delete(r.Outcomes["abuser acquire"], "429 quota-exceeded") }, "abuser acquire never got 429 quota-exceeded"},
		{"the rate limit never bit", func(r *Report) { delete(r.Outcomes["abuser register"], "429 rate-limited") }, "never got 429 rate-limited"},
		{"the blocking cap never bit", func(r *Report) { r.Outcomes["anonymous blocking query"] = map[string]int{"transport": 3} },
			"anonymous blocking query never got 429 rate-limited"},
		{"too many blocking queries held", func(r *Report) { r.MaxBlocking["b"] = 200 }, "b held 200 blocking queries at once, want at most 80"},
		{"the registry grew", func(r *Report) { r.Series["b"] = 5000 }, "b has 5000 request series"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := clean()
			tt.edit(r)
			v := r.Violations()
			if !strings.Contains(strings.Join(v, "\n"), tt.want) {
				t.Errorf("Violations() = %v, want one containing %q", v, tt.want)
			}
		})
	}
}

func TestAnswer_Outcome(t *testing.T) {
	for _, tt := range []struct {
		a    answer
		want string
	}{
		{answer{status: 200}, "200"},
		{answer{status: 429, code: wire.CodeRateLimited}, "429 rate-limited"},
		{answer{err: fmt.Errorf("dial: connection reset")}, "transport"},
		{answer{err: context.Canceled}, "cancelled"},
	} {
		if got := tt.a.outcome(); got != tt.want {
			t.Errorf("outcome(%+v) = %q, want %q", tt.a, got, tt.want)
		}
	}
}
