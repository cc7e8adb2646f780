package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
)

func TestRunBench_EveryOp(t *testing.T) {
	c := apitest.Start(t, apitest.Options{Timeout: 500 * time.Millisecond}) // the production timeouts: steady under -race on a loaded machine
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	// 16 clients, the default, hold more leases at once than the cluster
	// allows one machine (a quarter of the 50-port band).
	for _, op := range []string{"renew", "register", "acquire"} {
		t.Run(op, func(t *testing.T) {
			res, err := runBench(context.Background(), io.Discard, benchSpec{
				op: op, urls: urls, token: c.Tokens.Member, duration: 500 * time.Millisecond, concurrency: 16,
			})
			if err != nil {
				t.Fatalf("runBench(%s) error = %v", op, err)
			}
			if res.Ops == 0 || res.Errors != 0 || res.P50Ms <= 0 || res.MaxMs < res.P99Ms {
				t.Fatalf("runBench(%s) = %+v, want ops, no errors and ordered percentiles", op, res)
			}
		})
	}
	// The run cleans up after itself: no lease or bench resource is left.
	leader := c.Nodes[c.Leader()].Node.FSM()
	c.WaitFor("bench leftovers released", 5*time.Second, func() bool {
		return len(leader.Leases()) == 0 && len(leader.Resources("", "")) == 0
	})
	_, err := runBench(context.Background(), io.Discard, benchSpec{op: "nope", urls: urls, token: c.Tokens.Member, duration: time.Second, concurrency: 1})
	if err == nil {
		t.Fatalf("runBench(nope) error = nil, want an unknown op error")
	}
}
