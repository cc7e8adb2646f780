package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--scenario", "leader-kill,one-way", "--nodes", "5", "--short"})
	if err != nil {
		t.Fatalf("parseFlags() = %v", err)
	}
	if len(o.scenarios) != 2 || o.scenarios[1] != "one-way" || o.nodes != 5 || o.duration != 8*time.Second || o.electionTimeout != 500*time.Millisecond {
		t.Errorf("parseFlags() = %+v", o)
	}
	o, err = parseFlags([]string{"--scenario", "all"})
	if err != nil || len(o.scenarios) != len(scenarios()) {
		t.Errorf("parseFlags(all) = %d scenarios, %v; want %d", len(o.scenarios), err, len(scenarios()))
	}
	o, err = parseFlags([]string{"--election-timeout", "1500ms"})
	if err != nil || o.electionTimeout != 1500*time.Millisecond {
		t.Errorf("parseFlags(--election-timeout 1500ms) = %v, %v", o.electionTimeout, err)
	}
	for _, bad := range [][]string{{"--scenario", "nope"}, {"--nodes", "4"}, {"--election-timeout", "10ms"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) = nil error, want one", bad)
		}
	}
}

func TestScenarios_CoverTheIssue(t *testing.T) {
	want := []string{"leader-kill", "leader-pause", "partition-leader", "partition-halves", "partition-bridge", "one-way",
		"slow-net", "restart-all", "disk-full", "disk-full-leader", "clock-skew", "rolling-restart", "abuse", "docker-partition"}
	have := map[string]bool{}
	for _, s := range scenarios() {
		have[s.name] = true
	}
	for _, n := range want {
		if !have[n] {
			t.Errorf("scenario %s missing", n)
		}
	}
}

func TestStats_MaxUnavailable(t *testing.T) {
	ms := int64(time.Millisecond)
	h := []check.Op{
		{Kind: check.LeaseAcquire, Outcome: check.OK, Return: 100 * ms},
		{Kind: check.LeaseRead, Outcome: check.OK, Return: 200 * ms}, // a read does not count
		{Kind: check.ResRegister, Outcome: check.Indeterminate, Return: 300 * ms},
		{Kind: check.ResRegister, Outcome: check.OK, Return: 900 * ms},
		{Kind: check.ResDelete, Outcome: check.Failed, Return: 950 * ms},
	}
	var r row
	stats(&r, h, 0, 1000*ms)
	if r.MaxUnavailableMs != 800 || r.Ops != 5 || r.OK != 3 || r.Failed != 1 || r.Indeterminate != 1 {
		t.Errorf("stats() = %+v, want 800 ms unavailable, 5 ops, 3 ok, 1 failed, 1 indeterminate", r)
	}
}

func TestStaticELF(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	// The test binary is linked the way this machine links by default; it
	// only has to be judged without error or with the dynamic-link message.
	if err := staticELF(exe); err != nil && !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("staticELF(test binary) = %v", err)
	}
	if err := staticELF("/nonexistent"); err == nil {
		t.Errorf("staticELF(missing file) = nil, want an error")
	}
}

// The --short pass proves TLS under faults: leader-kill and partition-leader
// run a second time with TLS; --tls runs everything with TLS but the
// container scenario.
func TestSuite_PlanTLS(t *testing.T) {
	names := func(args ...string) []string {
		o, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sc := range (&suite{opt: o}).plan() {
			out = append(out, sc.runName())
		}
		return out
	}
	short := names("--short")
	for _, want := range []string{"leader-kill+tls", "partition-leader+tls", "leader-kill", "docker-partition"} {
		if !slices.Contains(short, want) {
			t.Errorf("--short plan %v lacks %s", short, want)
		}
	}
	if got := names("--scenario", "leader-kill,docker-partition", "--tls"); !slices.Equal(got, []string{"leader-kill+tls", "docker-partition"}) {
		t.Errorf("--tls plan = %v", got)
	}
	if got := names("--scenario", "one-way"); !slices.Equal(got, []string{"one-way"}) {
		t.Errorf("plain plan = %v", got)
	}
}
