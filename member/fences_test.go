package member

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

func TestGuard_Admit(t *testing.T) {
	var g Guard
	steps := []struct {
		resource string
		fence    uint64
		ok       bool
		highest  uint64
	}{
		{"bucket/a", 7, true, 7},
		{"bucket/a", 7, true, 7}, // the same holder again
		{"bucket/a", 12, true, 12},
		{"bucket/a", 7, false, 12}, // the old holder, woken up
		{"bucket/b", 3, true, 3},   // another resource keeps its own fence
		{"bucket/a", 0, false, 12},
		{"bucket/b", 0, false, 3},
	}
	for i, s := range steps {
		err := g.Admit(s.resource, s.fence)
		if (err == nil) != s.ok {
			t.Fatalf("step %d: Admit(%q, %d) error = %v, want ok=%v", i, s.resource, s.fence, err, s.ok)
		}
		if err != nil {
			var stale *StaleFenceError
			if !errors.Is(err, ErrStaleFence) || !errors.As(err, &stale) || stale.Resource != s.resource || stale.API != nil {
				t.Errorf("step %d: Admit() error = %#v, want a guard's *StaleFenceError for %s", i, err, s.resource)
			}
			if s.fence != 0 && stale.Current != s.highest {
				t.Errorf("step %d: Current = %d, want %d", i, stale.Current, s.highest)
			}
			if StatusCode(err) != 0 {
				t.Errorf("step %d: StatusCode() = %d, want 0 for a refusal without a round trip", i, StatusCode(err))
			}
		}
		if got := g.Highest(s.resource); got != s.highest {
			t.Errorf("step %d: Highest(%q) = %d, want %d", i, s.resource, got, s.highest)
		}
	}
	g.Observe("bucket/b", 2) // never lowers
	g.Observe("bucket/c", 40)
	if g.Highest("bucket/b") != 3 || g.Highest("bucket/c") != 40 || g.Admit("bucket/c", 39) == nil {
		t.Errorf("after Observe: highest b=%d c=%d, want 3 and 40 with 39 refused", g.Highest("bucket/b"), g.Highest("bucket/c"))
	}
}

// TestGuard_AdmitConcurrent: whatever the interleaving, the guard ends at
// the highest fence, and every fence it admitted was at least the highest
// admitted before it (checked by the recorder, under its own lock).
func TestGuard_AdmitConcurrent(t *testing.T) {
	var g Guard
	var mu sync.Mutex
	var admitted []uint64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				fence := uint64(i*8 + w + 1)
				mu.Lock()
				if g.Admit("r", fence) == nil {
					admitted = append(admitted, fence)
				}
				mu.Unlock()
				_ = g.Admit("r", fence/2+1) // racing lower fences, unrecorded
			}
		}()
	}
	wg.Wait()
	if got := g.Highest("r"); got != 200*8 {
		t.Errorf("Highest() = %d, want %d", got, 200*8)
	}
	for i := 1; i < len(admitted); i++ {
		if admitted[i] < admitted[i-1] {
			t.Fatalf("admitted %d after %d", admitted[i], admitted[i-1])
		}
	}
}

// checkerOf answers CheckFence from a table of port → live fence, counting
// calls.
type checkerOf struct {
	live  map[int]uint64
	err   error
	calls int
}

func (c *checkerOf) CheckFence(_ context.Context, port int, fence uint64) (wire.FenceCheck, error) {
	c.calls++
	if c.err != nil {
		return wire.FenceCheck{}, c.err
	}
	if live, ok := c.live[port]; ok && live == fence {
		return wire.FenceCheck{Valid: true, Port: port, Fence: fence, Machine: "m"}, nil
	}
	return wire.FenceCheck{}, &StaleFenceError{Port: port, Fence: fence, Current: c.live[port], Reason: "granted again",
		API: &APIError{Status: http.StatusConflict, Code: wire.CodeStaleFence}}
}

func TestGuard_Confirm(t *testing.T) {
	ctx := t.Context()
	var g Guard
	cluster := &checkerOf{live: map[int]uint64{31450: 20}}

	if _, err := g.Confirm(ctx, cluster, "db", 31450, 20); err != nil {
		t.Fatalf("Confirm(live fence 20) error = %v", err)
	}
	if g.Highest("db") != 20 {
		t.Errorf("Highest() = %d after a confirmed 20", g.Highest("db"))
	}

	// A lower fence is refused without a round trip.
	calls := cluster.calls
	if _, err := g.Confirm(ctx, cluster, "db", 31450, 11); !errors.Is(err, ErrStaleFence) || cluster.calls != calls {
		t.Errorf("Confirm(11 < 20) error = %v after %d cluster calls, want ErrStaleFence and no call", err, cluster.calls-calls)
	}

	// The port is granted again under 31; the guard has not seen it. A
	// fence 25 (say, a grant of the port between) passes the monotonic
	// check, the cluster refuses it, and the guard learns 31.
	cluster.live[31450] = 31
	_, err := g.Confirm(ctx, cluster, "db", 31450, 25)
	var stale *StaleFenceError
	if !errors.As(err, &stale) || stale.Resource != "db" || stale.Current != 31 || StatusCode(err) != http.StatusConflict {
		t.Fatalf("Confirm(25, port now at 31) error = %#v, want the cluster's 409 for db with Current 31", err)
	}
	if g.Highest("db") != 31 || g.Admit("db", 30) == nil {
		t.Errorf("Highest() = %d after the cluster reported 31, want 31 and 30 refused locally", g.Highest("db"))
	}

	// An unreachable cluster: refused, the guard unchanged.
	cluster.err = ErrUnreachable
	if _, err := g.Confirm(ctx, cluster, "db", 31450, 31); !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrStaleFence) {
		t.Errorf("Confirm() with the cluster unreachable error = %v, want ErrUnreachable", err)
	}
	if g.Highest("db") != 31 {
		t.Errorf("Highest() = %d after a failed confirmation, want 31", g.Highest("db"))
	}
}

// TestClient_CheckFence decodes the three answers of POST /v1/fences/check
// from the fake network.
func TestClient_CheckFence(t *testing.T) {
	n := newFakeNet()
	c := fakeClient(t, n, tokenA, hostA)
	key := hostA + " POST /v1/fences/check"
	n.script(key,
		outcome{status: 200, body: `{"valid":true,"port":31450,"fence":9,"generation":2,"machine":"mbp","expiresAt":5}`},
		outcome{status: 409, body: `{"error":"stale-fence","message":"port 31450 was granted again, under fence 14","currentFence":14}`},
		outcome{status: 409, body: `{"error":"stale-fence","message":"port 31450 has no live lease"}`},
		outcome{status: 200, body: `{"valid":true,"port":31450,"fence":8,"generation":2,"machine":"mbp","expiresAt":5}`},
		outcome{status: 400, body: `{"error":"invalid-request","message":"fence must be a positive integer"}`},
	)
	got, err := c.CheckFence(t.Context(), 31450, 9)
	if want := (wire.FenceCheck{Valid: true, Port: 31450, Fence: 9, Generation: 2, Machine: "mbp", ExpiresAt: 5}); err != nil || got != want {
		t.Errorf("CheckFence(valid) = %+v, %v, want %+v", got, err, want)
	}
	if hits := n.requests("POST /v1/fences/check"); len(hits) != 1 || hits[0].body != `{"port":31450,"fence":9}` || hits[0].auth != "Bearer "+tokenA {
		t.Errorf("request = %v, want the body {port, fence} with the token", hits)
	}
	for _, want := range []uint64{14, 0} {
		_, err = c.CheckFence(t.Context(), 31450, 9)
		var stale *StaleFenceError
		if !errors.As(err, &stale) || stale.Current != want || stale.Port != 31450 || stale.Fence != 9 || ErrorCode(err) != wire.CodeStaleFence || stale.Reason == "" {
			t.Errorf("CheckFence(stale) error = %#v, want a *StaleFenceError with Current %d", err, want)
		}
	}
	// A 200 about another fence is no confirmation.
	if _, err := c.CheckFence(t.Context(), 31450, 9); !errors.Is(err, ErrInvalidResponse) {
		t.Errorf("CheckFence(answer of another fence) error = %v, want ErrInvalidResponse", err)
	}
	if _, err := c.CheckFence(t.Context(), 31450, 0); errors.Is(err, ErrStaleFence) || StatusCode(err) != 400 {
		t.Errorf("CheckFence(400) error = %v, want a 400 *APIError, not a stale fence", err)
	}
}
