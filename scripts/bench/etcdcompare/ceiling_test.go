package main

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// startNoop runs a ceiling process in this test process on a free port.
func startNoop(t *testing.T, ctx context.Context, forward string) string {
	t.Helper()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	done := make(chan error, 1)
	go func() { done <- runNoopServer(ctx, addr, forward) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("runNoopServer(%s) = %v", addr, err)
		}
	})
	u := "http://" + addr
	if err := waitAnswer(ctx, u); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestNoopServer_ForwarderCopiesTheAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := startNoop(t, ctx, "")
	second := startNoop(t, ctx, first)
	for _, u := range []string{first, second} {
		c := &elClient{url: u, token: "t", http: newHTTPClient(), timeout: 2 * time.Second}
		if err := c.register(ctx, registerBody(benchID(1), "bench", benchTTLMs)); err != nil {
			t.Fatalf("register through %s: %v", u, err)
		}
		resp, err := http.Post(u+"/v1/resources/register", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != string(noopAnswer) {
			t.Errorf("answer through %s = %q, want %q", u, body, noopAnswer)
		}
	}
	cancel()
}

func TestNoopServer_ForwardToNobodyIs503(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	u := startNoop(t, ctx, "http://127.0.0.1:"+strconv.Itoa(ports[0]))
	resp, err := http.Post(u+"/x", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status = %d, want 503", resp.StatusCode)
	}
	cancel()
}

func TestCeilingFractions(t *testing.T) {
	rep := &report{
		Rows: []rowReport{
			{rowSpec: rowSpec{ID: rowWrite}, BestEtcd: "etcd 3.4", Results: map[string]*stats{"elanous": {OpsPerSec: 4000}, "etcd 3.4": {OpsPerSec: 5000}}},
			{rowSpec: rowSpec{ID: rowSingle}, Results: map[string]*stats{"elanous": {OpsPerSec: 700}}},
			{rowSpec: rowSpec{ID: rowRenewal}, Results: map[string]*stats{"etcd 3.4": {OpsPerSec: 9000}}},
			{rowSpec: rowSpec{ID: rowOpen}, Results: map[string]*stats{"elanous": {OpsPerSec: 3500, TargetPerSec: 3500}}},
		},
		Ceiling: &ceilingReport{One: &stats{OpsPerSec: 30000}, Spread: &stats{OpsPerSec: 16000}},
	}
	ceilingFractions(rep)
	got := rep.Ceiling.OfSpread
	if len(got) != 1 || math.Abs(got[rowWrite]-0.25) > 1e-9 {
		t.Errorf("OfSpread = %v, want only write: 0.25 (single is one client, open an offered rate; renewal has no elanous figure)", got)
	}
	var b strings.Builder
	printCeiling(&b, rep, rep.Ceiling)
	for _, want := range []string{"| write | 4,000 | 25% | 47% |", "30,000/s", "16,000/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printCeiling lacks %q:\n%s", want, b.String())
		}
	}
}
