package member

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestStartPortLease_Validation(t *testing.T) {
	n := newFakeNet()
	c := fakeClient(t, n, tokenA, hostA)
	noop := func(error) {}
	tests := []struct {
		name    string
		port    int
		leaseID string
		cfg     PortLeaseConfig
	}{
		// port-lease-heartbeat.ts: `port < PORT_BANDS.test.start || port > PORT_BANDS.test.end` → invalid coordinator lease port
		{"below the band", 31449, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop}},
		{"above the band", 31500, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop}},
		{"outside a custom band", 31450, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop, Band: Band{Start: 40000, End: 40010}}},
		// `if (!leaseId?.trim()) throw new Error('missing coordinator lease id')`
		{"blank lease id", 31450, "  ", PortLeaseConfig{Client: c, OnLeaseLost: noop}},
		// `intervalMs <= 0 || intervalMs >= PORT_LEASE_TTL_MS - EXPIRY_MARGIN_MS` → invalid coordinator renewal interval
		{"negative interval", 31450, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop, Interval: -time.Second}},
		{"interval at TTL - margin", 31450, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop, Interval: 590 * time.Second}},
		{"short TTL with the default interval", 31450, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop, TTL: 3 * time.Second}},
		// `retryMs <= 0`
		{"negative retry", 31450, "l", PortLeaseConfig{Client: c, OnLeaseLost: noop, Retry: -time.Second}},
		{"no client", 31450, "l", PortLeaseConfig{OnLeaseLost: noop}},
		{"no OnLeaseLost", 31450, "l", PortLeaseConfig{Client: c}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := StartPortLease(t.Context(), tt.port, tt.leaseID, tt.cfg)
			if err == nil {
				k.Stop(t.Context())
				t.Fatalf("StartPortLease() error = nil, want an error")
			}
			if got := len(n.requests("renew")); got != 0 {
				t.Errorf("renewals = %d, want none before validation passes", got)
			}
		})
	}
}

// skewClock is the runtime clock plus an adjustable offset, to make a
// success "arrive" after the deadline without the timers noticing.
type skewClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

func (c *skewClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew += d
}

// TestPortLease_SuccessAfterDeadlineIsLost mirrors renew's
// `if (receivedAt >= lastSuccess + PORT_LEASE_TTL_MS - EXPIRY_MARGIN_MS) { lost(…); return; }`.
func TestPortLease_SuccessAfterDeadlineIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setPrimary(hostA, primaryOf(hostA, "a", 1))
		clock := &skewClock{}
		n.mu.Lock()
		n.onHit = func(h hit) {
			if h.kind == "renew" && h.at == 30*time.Second {
				clock.add(10 * time.Minute) // the answer is received long after it was sent
			}
		}
		n.mu.Unlock()
		c := fakeClient(t, n, tokenA, hostA)
		k, rec := startLease(t, t.Context(), n, c, 31450, "lease-1", func(cfg *PortLeaseConfig) {
			cfg.Clock = clock
		})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if len(rec.lost) != 1 || !errors.Is(rec.lost[0], ErrLeaseDeadline) {
			t.Fatalf("lost = %v, want one ErrLeaseDeadline", rec.lost)
		}
		if got, want := n.times("renew"), secs(0, 30); !slices.Equal(got, want) {
			t.Errorf("renewal times = %v, want %v", got, want)
		}
		k.Stop(t.Context())
	})
}

// TestPortLease_StopWaitsForRenewal mirrors the stop function's `await
// pending;` before the DELETE, which tolerates 403 and 404.
func TestPortLease_StopWaitsForRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.script(hostA+" renew", status(200), hang)
		k, rec := startLease(t, t.Context(), n, c, 31450, "lease-1", nil)
		time.Sleep(30*time.Second + 500*time.Millisecond) // a renewal is in flight since 30 s
		if err := k.Stop(t.Context()); err != nil {
			t.Fatalf("Stop() error = %v", err)
		}
		// The renewal times out at 31 s and is not retried once stopping; then the DELETE.
		if got, want := n.times("release"), secs(31); !slices.Equal(got, want) {
			t.Errorf("release times = %v, want %v", got, want)
		}
		if got, want := n.times("renew"), secs(0, 30); !slices.Equal(got, want) {
			t.Errorf("renewal times = %v, want %v", got, want)
		}
		if len(rec.lost) != 0 {
			t.Errorf("lost = %v, want none after Stop", rec.lost)
		}
	})
}

func TestPortLease_StopRelease(t *testing.T) {
	tests := []struct {
		name    string
		answer  outcome
		wantErr bool
	}{
		{"204 released", status(204), false},
		{"404 tolerated", status(404), false},
		{"403 tolerated", status(403), false},
		// `if (!response.ok && response.status !== 404 && response.status !== 403) throw …`
		{"409 is an error", status(409), true},
		{"500 is an error", status(500), true},
		{"refused twice is an error", refused, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, c := oneHostPrimaryA(t)
				n.setDefault(hostA+" release", tt.answer)
				k, _ := startLease(t, t.Context(), n, c, 31450, "lease-1", nil)
				err := k.Stop(t.Context())
				if (err != nil) != tt.wantErr {
					t.Errorf("Stop() error = %v, wantErr %v", err, tt.wantErr)
				}
				if again := k.Stop(t.Context()); !errors.Is(again, err) {
					t.Errorf("second Stop() = %v, want the first result %v", again, err)
				}
			})
		})
	}
}

// TestPortLease_LostOnceCallbackMayStop: OnLeaseLost runs exactly once and
// may call Stop without deadlocking.
func TestPortLease_LostOnceCallbackMayStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.script(hostA+" renew", status(200), status(409))
		var mu sync.Mutex
		calls, stopErr := 0, error(nil)
		var k *PortLeaseKeeper
		started := make(chan struct{})
		k, err := StartPortLease(t.Context(), 31450, "lease-1", PortLeaseConfig{Client: c, OnLeaseLost: func(error) {
			<-started
			err := k.Stop(context.Background())
			mu.Lock()
			calls++
			stopErr = err
			mu.Unlock()
		}})
		if err != nil {
			t.Fatalf("StartPortLease() error = %v", err)
		}
		close(started)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if calls != 1 || stopErr != nil {
			t.Errorf("OnLeaseLost calls = %d, Stop() in it = %v; want 1, nil", calls, stopErr)
		}
		if got := len(n.requests("release")); got != 1 {
			t.Errorf("releases = %d, want 1", got)
		}
	})
}

// TestPortLease_ShortTTL: a 3 s lease renewed every 500 ms keeps a 1 s
// margin (TTL/3); failing from the start it is lost 2 s after the last
// success, retrying every 500 ms in between.
func TestPortLease_ShortTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.script(hostA+" renew", status(200))
		n.setDefault(hostA+" renew", status(500))
		k, rec := startLease(t, t.Context(), n, c, 31450, "lease-1", func(cfg *PortLeaseConfig) {
			cfg.TTL, cfg.Interval, cfg.Retry = 3*time.Second, 500*time.Millisecond, 500*time.Millisecond
		})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got, want := rec.lostAt, secs(2); !slices.Equal(got, want) {
			t.Errorf("lost at %v, want %v", got, want)
		}
		if got, want := n.times("renew"), secs(0, 0.5, 1, 1.5); !slices.Equal(got, want) {
			t.Errorf("renewal times = %v, want %v", got, want)
		}
		k.Stop(t.Context())
	})
}

// TestPortLease_RetryBoundedByDeadline mirrors `Math.min(options.retryMs ??
// RETRY_MS, lastSuccess + TTL - MARGIN - now())`: a retry longer than the
// time left is cut to the deadline, where the lease is lost — exactly at
// 590 s, not at the 100 s retry.
func TestPortLease_RetryBoundedByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.script(hostA+" renew", status(200), status(500), status(200))
		k, rec := startLease(t, t.Context(), n, c, 31450, "lease-1", func(cfg *PortLeaseConfig) {
			cfg.Interval, cfg.Retry = 580*time.Second, 100*time.Second
		})
		time.Sleep(800 * time.Second)
		synctest.Wait()
		if got, want := n.times("renew"), secs(0, 580); !slices.Equal(got, want) {
			t.Errorf("renewal times = %v, want %v", got, want)
		}
		// The retry is due exactly at the deadline, which wins (as the
		// earlier-armed timer does in Node): the lease is lost, not renewed late.
		if !slices.Equal(rec.lostAt, secs(590)) || !errors.Is(rec.lost[0], ErrLeaseDeadline) {
			t.Errorf("lost = %v at %v, want ErrLeaseDeadline at 590s", rec.lost, rec.lostAt)
		}
		k.Stop(t.Context())
	})
}

func TestPortLease_ContextCancelStopsWithoutRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		rec := &leaseRecorder{start: n.start}
		ctx, cancel := context.WithCancel(t.Context())
		_, err := StartPortLease(ctx, 31450, "lease-1", testLeaseConfig(c, rec))
		if err != nil {
			t.Fatalf("StartPortLease() error = %v", err)
		}
		time.Sleep(45 * time.Second)
		cancel()
		time.Sleep(10 * time.Minute)
		if got, want := n.times("renew"), secs(0, 30); !slices.Equal(got, want) {
			t.Errorf("renewal times = %v, want %v", got, want)
		}
		if got := len(n.requests("release")); got != 0 || len(rec.lost) != 0 {
			t.Errorf("releases = %d, lost = %v; want none", got, rec.lost)
		}
	})
}
