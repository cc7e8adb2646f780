package member

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// seen records WatchPrimary callbacks with their fake-clock time.
type seen struct {
	start time.Time
	mu    sync.Mutex
	got   []string
}

func (s *seen) add(p wire.Primary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, time.Since(s.start).String()+" "+p.Holder+" "+p.URL+" "+strings.Repeat("|", int(p.Generation)))
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func TestWatchPrimary_BlockingQueries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		for _, h := range []string{"a.test", "b.test", "c.test"} {
			n.setPrimary(h, primaryOf("a.test", "a", 1))
		}
		r, err := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{
			{Machine: "a", URL: "http://a.test"}, {Machine: "b", URL: "http://b.test"}, {Machine: "c", URL: "http://c.test"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		s := &seen{start: n.start}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.WatchPrimary(ctx, s.add) }()

		time.Sleep(10 * time.Second)
		// b applies a new claim: its blocking query answers at once.
		n.setPrimary("b.test", primaryOf("b.test", "b", 2))
		synctest.Wait()
		// a and c catch up later; the same generation is not reported again.
		time.Sleep(5 * time.Second)
		n.setPrimary("a.test", primaryOf("b.test", "b", 2))
		n.setPrimary("c.test", primaryOf("b.test", "b", 2))
		time.Sleep(100 * time.Second)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchPrimary() = %v, want context.Canceled", err)
		}
		want := []string{"0s a http://a.test |", "10s b http://b.test ||"}
		if got := s.list(); !slices.Equal(got, want) {
			t.Errorf("callbacks = %q, want %q", got, want)
		}
		// Blocking, not polling: one plain query, then one per change or 30 s wait.
		bq := n.requests("primary")
		var onB []string
		for _, h := range bq {
			if h.host == "b.test" {
				onB = append(onB, h.at.String()+" "+h.path)
			}
		}
		wantB := []string{
			"0s /v1/primary", "0s /v1/primary?index=1&wait=30s", "10s /v1/primary?index=2&wait=30s",
			"40s /v1/primary?index=2&wait=30s", "1m10s /v1/primary?index=2&wait=30s", "1m40s /v1/primary?index=2&wait=30s",
		}
		if !slices.Equal(onB, wantB) {
			t.Errorf("queries to b = %q, want %q", onB, wantB)
		}
		for _, h := range bq {
			if h.auth != "" {
				t.Errorf("watch query carried Authorization")
			}
		}
	})
}

// TestWatchPrimary_NoBlockingSupport: a server that sends no X-Elanous-Index
// is polled once a second, not hammered.
func TestWatchPrimary_NoBlockingSupport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setDefault("a.test primary", body(`{"known":true,"holder":"a","generation":3}`))
		s := &seen{start: n.start}
		ctx, cancel := context.WithCancel(t.Context())
		r, _ := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{{Machine: "a", URL: "http://a.test"}}})
		go r.WatchPrimary(ctx, s.add)
		time.Sleep(5*time.Second + time.Millisecond)
		cancel()
		synctest.Wait()
		if got, want := n.times("primary"), secs(0, 1, 2, 3, 4, 5); !slices.Equal(got, want) {
			t.Errorf("query times = %v, want %v", got, want)
		}
		if got := s.list(); len(got) != 1 {
			t.Errorf("callbacks = %q, want one", got)
		}
	})
}

// TestWatchPrimary_Backoff: an unreachable candidate is retried with a
// growing delay.
func TestWatchPrimary_Backoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setDefault("a.test primary", refused)
		ctx, cancel := context.WithCancel(t.Context())
		r, _ := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{{Machine: "a", URL: "http://a.test"}}})
		go r.WatchPrimary(ctx, func(wire.Primary) {})
		time.Sleep(70 * time.Second)
		cancel()
		synctest.Wait()
		if got, want := n.times("primary"), secs(0, 1, 3, 7, 15, 31, 61); !slices.Equal(got, want) {
			t.Errorf("query times = %v, want %v", got, want)
		}
	})
}

// TestClient_FollowPrimary: the client's target moves to a new primary the
// moment its claim is seen, with the token configured for that address.
func TestClient_FollowPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setPrimary("a.test", primaryOf("a.test", "a", 1))
		n.setPrimary("b.test", primaryOf("a.test", "a", 1))
		c := fakeClient(t, n, tokenA, "a.test", "b.test")
		if addr, err := c.Target(t.Context()); err != nil || addr.URL != "http://a.test" {
			t.Fatalf("Target() = %v, %v; want a", addr, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		go c.FollowPrimary(ctx)
		time.Sleep(3 * time.Second)
		n.setPrimary("b.test", primaryOf("b.test", "b", 2))
		synctest.Wait()
		addr, _ := c.Target(t.Context())
		if addr.URL != "http://b.test" || addr.Generation != 2 || addr.Token != tokenA {
			t.Errorf("Target() = %s generation %d, want b generation 2 with its token", addr.URL, addr.Generation)
		}
		cancel()
		synctest.Wait()
	})
	fixed, _ := NewClient(ClientConfig{URL: "http://a.test"})
	if err := fixed.FollowPrimary(t.Context()); err == nil {
		t.Errorf("FollowPrimary() on a fixed client = nil, want an error")
	}
}

// claimServer is a real HTTP server with Consul-style blocking on
// /v1/primary, playing the server side of the contract.
type claimServer struct {
	*httptest.Server
	mu      sync.Mutex
	primary wire.Primary
	index   uint64
	changed chan struct{}
}

func newClaimServer(t *testing.T) *claimServer {
	s := &claimServer{changed: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		s.mu.Lock()
		index, changed := s.index, s.changed
		s.mu.Unlock()
		if asked > 0 && asked >= index {
			t := time.NewTimer(wait)
			select {
			case <-changed:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
		}
		s.mu.Lock()
		p, index := s.primary, s.index
		s.mu.Unlock()
		w.Header().Set(wire.HeaderIndex, strconv.FormatUint(index, 10))
		json.NewEncoder(w).Encode(p)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *claimServer) claim(p wire.Primary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.primary = p
	s.index++
	close(s.changed)
	s.changed = make(chan struct{})
}

// TestWatchPrimary_RealServer: over real HTTP, a new claim reaches the
// callback while the watcher's blocking query is parked on the server.
func TestWatchPrimary_RealServer(t *testing.T) {
	a := newClaimServer(t)
	a.claim(wire.Primary{Known: true, Holder: "a", Generation: 1})
	got := make(chan wire.Primary, 4)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- WatchPrimary(ctx, []Candidate{{Machine: "a", URL: a.URL}, {Machine: "b", URL: "http://127.0.0.1:1"}},
			func(p wire.Primary) { got <- p })
	}()
	first := <-got
	if first.Holder != "a" || first.Generation != 1 || first.URL != a.URL {
		t.Fatalf("first callback = %+v, want a at generation 1", first)
	}
	a.claim(wire.Primary{Known: true, Holder: "a", Generation: 2})
	select {
	case p := <-got:
		if p.Generation != 2 {
			t.Errorf("second callback = %+v, want generation 2", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no callback within 10s of the new claim")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchPrimary() = %v, want context.Canceled", err)
	}
}
