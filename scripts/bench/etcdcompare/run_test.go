package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	tests := []optionsCase{
		{"defaults", nil, false, defaultRows},
		{"keepalive is the renewal row", []string{"--ops", "keepalive,renewal,load"}, false, []string{rowRenewal, rowLoad}},
		{"open needs a population", []string{"--ops", "open"}, true, nil},
		{"open over a fill", []string{"--ops", "open", "--fill", "100"}, false, []string{rowOpen}},
		{"open over its own members", []string{"--ops", "open", "--open-members", "10"}, false, []string{rowOpen}},
		{"negative open leases", []string{"--ops", "open", "--open-members", "10", "--open-leases", "-1"}, true, nil},
		{"subset keeps order given, drops repeats", []string{"--ops", "single, write,single"}, false, []string{rowSingle, rowWrite}},
		{"unknown row", []string{"--ops", "write,bogus"}, true, nil},
		{"empty ops", []string{"--ops", ","}, true, nil},
		{"too many clients", []string{"--clients", "51"}, true, nil},
		{"no clients", []string{"--clients", "0"}, true, nil},
		{"bad only", []string{"--only", "consul"}, true, nil},
		{"zero duration", []string{"--duration", "0s"}, true, nil},
		{"stray argument", []string{"write"}, true, nil},
	}
	runOptionsCases(t, tests)
}

// optionsCase is a command line (after --repo) and what parseOptions makes
// of it: an error, or the rows to run.
type optionsCase struct {
	name    string
	args    []string
	wantErr bool
	wantOps []string
}

func runOptionsCases(t *testing.T, tests []optionsCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(append([]string{"--repo", t.TempDir()}, tt.args...), io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseOptions(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && !slices.Equal(o.ops, tt.wantOps) {
				t.Errorf("parseOptions(%q) ops = %q, want %q", tt.args, o.ops, tt.wantOps)
			}
		})
	}
}

func TestComputeRatios(t *testing.T) {
	rep := &report{Rows: []rowReport{
		{rowSpec: rowSpec{ID: rowWrite}, Results: map[string]*stats{
			"etcd 3.4": {OpsPerSec: 4000}, "etcd 3.6": {OpsPerSec: 5000}, "elanous": {OpsPerSec: 2500}}},
		{rowSpec: rowSpec{ID: rowSingle}, Results: map[string]*stats{
			"etcd 3.4": {OpsPerSec: 1000, P50Ms: 1}, "etcd 3.6": {OpsPerSec: 900, P50Ms: 0.5}, "elanous": {OpsPerSec: 500, P50Ms: 2}}},
		{rowSpec: rowSpec{ID: rowFailover}, Results: map[string]*stats{
			"etcd 3.4": {GapMedianMs: 1400}, "etcd 3.6": {GapMedianMs: 1000}, "elanous": {GapMedianMs: 500}}},
		{rowSpec: rowSpec{ID: rowLock}, Results: map[string]*stats{"elanous": {OpsPerSec: 100}}},
		{rowSpec: rowSpec{ID: rowOpen}, Results: map[string]*stats{
			"etcd 3.4": {OpsPerSec: 3500, P99Ms: 8}, "etcd 3.6": {OpsPerSec: 3400, P99Ms: 4}, "elanous": {OpsPerSec: 3500, P99Ms: 12}}},
	}}
	computeRatios(rep)
	want := []struct {
		best            string
		ratio, p50Ratio float64
	}{
		{"etcd 3.6", 0.5, 0},
		{"etcd 3.4", 0.5, 4}, // best by ops/s; p50 against the lower etcd p50
		{"etcd 3.6", 0.5, 0}, // the lower median gap is the better etcd
		{"", 0, 0},           // no etcd: no ratio
		{"etcd 3.6", 3, 0},   // the open row: the lower p99 is the better etcd
	}
	for i, w := range want {
		r := rep.Rows[i]
		if r.BestEtcd != w.best || r.Ratio != w.ratio || r.P50Ratio != w.p50Ratio {
			t.Errorf("row %s: best %q ratio %v p50 ratio %v, want %q %v %v", r.ID, r.BestEtcd, r.Ratio, r.P50Ratio, w.best, w.ratio, w.p50Ratio)
		}
	}
}

func TestQuantile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := quantile(sorted, tt.q); got != tt.want {
			t.Errorf("quantile(1..100 ms, %v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := quantile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("quantile([7], 0.99) = %v, want 7", got)
	}
}

func TestThousands(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		want string
	}{{0, "0"}, {999.4, "999"}, {999.5, "1,000"}, {12039, "12,039"}, {1234567, "1,234,567"}} {
		if got := thousands(tt.v); got != tt.want {
			t.Errorf("thousands(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}
