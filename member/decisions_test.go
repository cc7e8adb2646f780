package member

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// The decision tables: the Go loops are fed the server answers the
// TypeScript rules were written for — 200, 404, 403, 409, 400, 503,
// connection refused, timeout — and must take the same decisions (keep
// going, re-register, back off by the schedule, lose the lease), observed as
// the exact fake-clock times of the requests they send. Each row names the
// line of the TypeScript client it mirrors. Where the Go client goes beyond
// it (re-resolve + one immediate retry on network errors and 503), the row
// says so; the extra request shows up in the timeline at the same instant.

const (
	hostA = "a.test"
	hostB = "b.test"
)

func primaryOf(host, holder string, generation uint64) wire.Primary {
	return wire.Primary{Known: true, Holder: holder, Generation: generation, URL: "http://" + host}
}

func fixedLoad(now time.Time) Load {
	return Load{LoadAvg: [3]float64{0.5, 0.25, 0.125}, CPUCount: 4, FreeMem: 1 << 30, TotalMem: 4 << 30, ObservedAt: now.UnixMilli()}
}

func testHeartbeatConfig(c *Client, interval time.Duration) HeartbeatConfig {
	return HeartbeatConfig{
		Client:   c,
		Machine:  Resource{ID: "machine:mbp", Name: "mbp", Attrs: map[string]any{"duties": []string{"build"}}},
		Instance: Resource{ID: "instance:mbp/1", Name: "nexus"},
		Endpoint: "http://10.0.0.9:31414",
		Interval: interval,
		Measure:  fixedLoad,
	}
}

// mustStartHeartbeat starts the heartbeat loop; the test fails if it does not start.
func mustStartHeartbeat(t *testing.T, ctx context.Context, cfg HeartbeatConfig) *Heartbeat {
	t.Helper()
	hb, err := StartHeartbeat(ctx, cfg)
	if err != nil {
		t.Fatalf("StartHeartbeat() error = %v", err)
	}
	return hb
}

func TestHeartbeat_Decisions(t *testing.T) {
	tests := []struct {
		name       string
		interval   time.Duration
		register   []outcome // answers to POST /v1/resources/register, in order (then 200)
		heartbeats []outcome // answers to the machine heartbeat, in order (then 200)
		until      time.Duration
		// Expected fake-clock times of each request of a kind.
		wantRegisters  []time.Duration
		wantHeartbeats []time.Duration
		wantResolves   []time.Duration // GET /v1/primary
	}{
		{
			// member.ts tick: `failures = 0; schedule(interval);`
			name: "200 keeps the interval", heartbeats: []outcome{status(200), status(200), status(200)}, until: 95 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 60, 90), wantResolves: secs(0),
		},
		{
			// member.ts post: `if (response.status === 404 && path.endsWith('/heartbeat')) registered = false;`
			// and tick: `schedule(!registered && reason === 'http-404' ? 0 : …)` — re-register at once.
			name: "404 re-registers at once", heartbeats: []outcome{status(404)}, until: 95 * time.Second,
			wantRegisters: secs(0, 0, 30, 30), wantHeartbeats: secs(30, 60, 90), wantResolves: secs(0),
		},
		{
			// member.ts tick: `schedule(Math.min(MAX_RETRY_MS, Math.min(interval, DEFAULT_INTERVAL_MS) * 2 ** (failures - 1)))`
			// 30, 60, 120, 240, 300 (capped), 300, 300; the success resets failures.
			name:       "403 backs off by the schedule",
			heartbeats: []outcome{status(403), status(403), status(403), status(403), status(403), status(403), status(403)},
			until:      1415 * time.Second, wantRegisters: secs(0, 0),
			wantHeartbeats: secs(30, 60, 120, 240, 480, 780, 1080, 1380, 1410), wantResolves: secs(0),
		},
		{
			// member.ts: every non-ok status but a heartbeat 404 is `http-${status}` → backoff.
			name: "409 backs off", heartbeats: []outcome{status(409), status(409), status(409)}, until: 275 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 60, 120, 240, 270), wantResolves: secs(0),
		},
		{
			// member.ts: `throw new Error(`http-${response.status}`)` → backoff.
			name: "400 backs off", heartbeats: []outcome{status(400), status(400), status(400)}, until: 275 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 60, 120, 240, 270), wantResolves: secs(0),
		},
		{
			// member.ts: http-503 → backoff. Beyond TS: each round re-resolves (GET /v1/primary)
			// and retries once at once before counting the failure; the backoff is unchanged.
			name:       "503 retries once then backs off",
			heartbeats: []outcome{status(503), status(503), status(503), status(503)}, until: 155 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 30, 60, 60, 120, 150), wantResolves: secs(0, 30, 60),
		},
		{
			// Beyond TS: a single 503 (a failover) costs one immediate retry, not a backoff.
			name: "503 once costs one retry", heartbeats: []outcome{status(503)}, until: 65 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 30, 60), wantResolves: secs(0, 30),
		},
		{
			// member.ts post: `catch { throw new Error('network-or-timeout'); }` → backoff (+ beyond-TS retry).
			name:       "connection refused retries once then backs off",
			heartbeats: []outcome{refused, refused, refused, refused}, until: 155 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 30, 60, 60, 120, 150), wantResolves: secs(0, 30, 60),
		},
		{
			// member.ts post: `AbortSignal.timeout(REQUEST_TIMEOUT_MS)` — 5 s — then 'network-or-timeout'.
			// The request at 30 times out at 35, the retry at 35 times out at 40, backoff 30 s → 70.
			name: "timeout after 5 s", heartbeats: []outcome{hang, hang}, until: 105 * time.Second,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(30, 35, 70, 100), wantResolves: secs(0, 35),
		},
		{
			// member.ts: the backoff base is min(interval, DEFAULT_INTERVAL_MS): 0.5, 1, 2 s.
			name: "short interval backs off from the interval", interval: 500 * time.Millisecond,
			heartbeats: []outcome{status(403), status(403), status(403)}, until: 4600 * time.Millisecond,
			wantRegisters: secs(0, 0), wantHeartbeats: secs(0.5, 1, 2, 4, 4.5), wantResolves: secs(0),
		},
		{
			// member.ts: a failed register is a failure like any other → backoff; then register again.
			name: "register 503 retries then backs off", register: []outcome{status(503), status(503)}, until: 65 * time.Second,
			wantRegisters: secs(0, 0, 30, 30), wantHeartbeats: secs(60), wantResolves: secs(0, 0),
		},
		{
			// Deviation: member.ts would schedule(0) after a 404 on *register* too (`!registered &&
			// reason === 'http-404'`), spinning without delay; here only a heartbeat 404 is immediate.
			name: "register 404 backs off", register: []outcome{status(404), status(404)}, until: 125 * time.Second,
			wantRegisters: secs(0, 30, 90, 90), wantHeartbeats: secs(120), wantResolves: secs(0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, c := oneHostPrimaryA(t)
				n.script(hostA+" register", tt.register...)
				n.script(hostA+" heartbeat", tt.heartbeats...)
				interval := tt.interval
				if interval == 0 {
					interval = DefaultHeartbeatInterval
				}
				hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, interval))
				// Inside the bubble, sleeping advances the fake clock deterministically.
				time.Sleep(tt.until)
				hb.Stop()
				if got := n.times("register"); !slices.Equal(got, tt.wantRegisters) {
					t.Errorf("register times = %v, want %v", got, tt.wantRegisters)
				}
				if got := n.times("heartbeat"); !slices.Equal(got, tt.wantHeartbeats) {
					t.Errorf("heartbeat times = %v, want %v\n%v", got, tt.wantHeartbeats, n.requests(""))
				}
				if got := n.times("primary"); !slices.Equal(got, tt.wantResolves) {
					t.Errorf("resolve times = %v, want %v", got, tt.wantResolves)
				}
			})
		})
	}
}

// TestHeartbeat_FailoverCostsOneRetry: the primary dies; the next heartbeat
// is refused, the client re-resolves to the new primary and the retry
// succeeds at the same instant — no backoff, no missed period.
func TestHeartbeat_FailoverCostsOneRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := twoHostsPrimaryA(t)
		hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, DefaultHeartbeatInterval))
		time.Sleep(45 * time.Second)
		// a is killed; b wins the election (generation 2).
		for _, kind := range []string{"primary", "register", "heartbeat"} {
			n.setDefault(hostA+" "+kind, refused)
		}
		n.setPrimary(hostB, primaryOf(hostB, "b", 2))
		time.Sleep(50 * time.Second)
		hb.Stop()
		var got []string
		for _, h := range n.requests("heartbeat") {
			got = append(got, h.at.String()+" "+h.host+" "+h.answer.String())
		}
		want := []string{"30s a.test 200", "1m0s a.test refused", "1m0s b.test 200", "1m30s b.test 200"}
		if !slices.Equal(got, want) {
			t.Errorf("heartbeats = %q, want %q", got, want)
		}
	})
}

// leaseRecorder records OnLeaseLost and OnError calls.
type leaseRecorder struct {
	start  time.Time
	mu     sync.Mutex
	lost   []error
	lostAt []time.Duration
	errors int
}

func (r *leaseRecorder) onLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, err)
	r.lostAt = append(r.lostAt, time.Since(r.start))
}

func (r *leaseRecorder) onError(error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors++
}

func testLeaseConfig(c *Client, rec *leaseRecorder) PortLeaseConfig {
	return PortLeaseConfig{Client: c, OnLeaseLost: rec.onLost, OnError: rec.onError}
}

// startLease starts the lease of port under leaseID through c with
// testLeaseConfig, changed by tweak (nil: as it is), recording into a new
// leaseRecorder from n's start; it fails the test if the lease does not start.
func startLease(t *testing.T, ctx context.Context, n *fakeNet, c *Client, port int, leaseID string, tweak func(*PortLeaseConfig)) (*PortLeaseKeeper, *leaseRecorder) {
	t.Helper()
	rec := &leaseRecorder{start: n.start}
	cfg := testLeaseConfig(c, rec)
	if tweak != nil {
		tweak(&cfg)
	}
	k, err := StartPortLease(ctx, port, leaseID, cfg)
	if err != nil {
		t.Fatalf("StartPortLease() error = %v", err)
	}
	return k, rec
}

// oneHostPrimaryA is a fake net of host a, which names itself the primary
// (generation 1), and a client of it.
func oneHostPrimaryA(t *testing.T) (*fakeNet, *Client) {
	n := newFakeNet()
	n.setPrimary(hostA, primaryOf(hostA, "a", 1))
	return n, fakeClient(t, n, tokenA, hostA)
}

// twoHostsPrimaryA is a fake net of hosts a and b that both name a the
// primary (generation 1), and a client of both.
func twoHostsPrimaryA(t *testing.T) (*fakeNet, *Client) {
	n := newFakeNet()
	n.setPrimary(hostA, primaryOf(hostA, "a", 1))
	n.setPrimary(hostB, primaryOf(hostA, "a", 1))
	return n, fakeClient(t, n, tokenA, hostA, hostB)
}

func TestPortLease_Decisions(t *testing.T) {
	tests := []struct {
		name     string
		renewals []outcome // answers after the first (successful) renewal, in order (then default)
		fallback *outcome  // default answer once renewals are used (200 when nil)
		until    time.Duration
		// nil wantRenewals: not checked.
		wantRenewals []time.Duration
		wantResolves []time.Duration
		wantLostAt   []time.Duration // empty: the lease is kept
		wantStatus   int             // status of the loss, 0 for the deadline
	}{
		{
			// port-lease-heartbeat.ts renew: `lastSuccess = receivedAt; armDeadline(); timer = setTimeout(tick, intervalMs ?? RENEW_MS)`
			name: "200 keeps the lease", renewals: []outcome{status(200), status(200)}, until: 65 * time.Second,
			wantRenewals: secs(0, 30, 60), wantResolves: secs(0),
		},
		{
			// `[400, 403, 404, 409].some(status => failure.message === `coordinator lease renewal HTTP ${status}`)) lost(failure)`
			name: "400 loses at once", renewals: []outcome{status(400)}, until: 65 * time.Second,
			wantRenewals: secs(0, 30), wantResolves: secs(0), wantLostAt: secs(30), wantStatus: 400,
		},
		{
			// same line: 403 (another owner)
			name: "403 loses at once", renewals: []outcome{status(403)}, until: 65 * time.Second,
			wantRenewals: secs(0, 30), wantResolves: secs(0), wantLostAt: secs(30), wantStatus: 403,
		},
		{
			// same line: 404 (no lease)
			name: "404 loses at once", renewals: []outcome{status(404)}, until: 65 * time.Second,
			wantRenewals: secs(0, 30), wantResolves: secs(0), wantLostAt: secs(30), wantStatus: 404,
		},
		{
			// same line: 409 (held under another lease id)
			name: "409 loses at once", renewals: []outcome{status(409)}, until: 65 * time.Second,
			wantRenewals: secs(0, 30), wantResolves: secs(0), wantLostAt: secs(30), wantStatus: 409,
		},
		{
			// `else timer = setTimeout(tick, Math.min(options.retryMs ?? RETRY_MS, lastSuccess + TTL - MARGIN - now()))`
			// 500 is not a loss and not retried at once: retry after 5 s.
			name: "500 retries after 5 s", renewals: []outcome{status(500), status(200)}, until: 66 * time.Second,
			wantRenewals: secs(0, 30, 35, 65), wantResolves: secs(0),
		},
		{
			// 503: the retry-after-5-s line; beyond TS, a re-resolve and one immediate retry first.
			name: "503 retries once then after 5 s", renewals: []outcome{status(503), status(503), status(200)}, until: 66 * time.Second,
			wantRenewals: secs(0, 30, 30, 35, 65), wantResolves: secs(0, 30),
		},
		{
			// Beyond TS: a failover (one 503) costs one immediate retry.
			name: "503 once costs one retry", renewals: []outcome{status(503)}, until: 61 * time.Second,
			wantRenewals: secs(0, 30, 30, 60), wantResolves: secs(0, 30),
		},
		{
			// fetch rejects → catch → retry after min(RETRY_MS, …); beyond TS the immediate retry.
			name: "connection refused retries", renewals: []outcome{refused, refused, status(200)}, until: 66 * time.Second,
			wantRenewals: secs(0, 30, 30, 35, 65), wantResolves: secs(0, 30),
		},
		{
			// `signal: AbortSignal.timeout(1000)`: 30 → 31 timeout, retry 31 → 32, then 5 s → 37.
			name: "timeout after 1 s", renewals: []outcome{hang, hang, status(200)}, until: 68 * time.Second,
			wantRenewals: secs(0, 30, 31, 37, 67), wantResolves: secs(0, 31),
		},
		{
			// armDeadline: `deadlineTimer = setTimeout(() => lost(new Error('… deadline exceeded')), remaining)`
			// with remaining = lastSuccess + 600 s − 10 s: failing from 30 s on, lost at 590 s.
			name: "failing until the deadline loses", fallback: &outcome{status: 503}, until: 700 * time.Second,
			wantLostAt: secs(590),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newFakeNet()
				n.setPrimary(hostA, primaryOf(hostA, "a", 1))
				n.script(hostA+" renew", status(200))
				n.script(hostA+" renew", tt.renewals...)
				if tt.fallback != nil {
					n.setDefault(hostA+" renew", *tt.fallback)
				}
				c := fakeClient(t, n, tokenA, hostA)
				k, rec := startLease(t, t.Context(), n, c, 31450, "lease-1", nil)
				time.Sleep(tt.until)
				synctest.Wait()
				rec.mu.Lock()
				lostAt, lost := slices.Clone(rec.lostAt), slices.Clone(rec.lost)
				rec.mu.Unlock()
				if !slices.Equal(lostAt, tt.wantLostAt) {
					t.Errorf("lost at %v, want %v (errors %v)", lostAt, tt.wantLostAt, lost)
				}
				if tt.wantRenewals != nil {
					if got := n.times("renew"); !slices.Equal(got, tt.wantRenewals) {
						t.Errorf("renewal times = %v, want %v", got, tt.wantRenewals)
					}
				}
				if tt.wantResolves != nil {
					if got := n.times("primary"); !slices.Equal(got, tt.wantResolves) {
						t.Errorf("resolve times = %v, want %v", got, tt.wantResolves)
					}
				}
				if len(tt.wantLostAt) > 0 && len(lost) > 0 {
					select {
					case <-k.Lost():
					default:
						t.Errorf("Lost() not closed after the loss")
					}
					switch {
					case tt.wantStatus != 0 && StatusCode(lost[0]) != tt.wantStatus:
						t.Errorf("loss = %v, want status %d", lost[0], tt.wantStatus)
					case tt.wantStatus == 0 && !errors.Is(lost[0], ErrLeaseDeadline):
						t.Errorf("loss = %v, want ErrLeaseDeadline", lost[0])
					}
					if !errors.Is(k.Err(), lost[0]) {
						t.Errorf("Err() = %v, want %v", k.Err(), lost[0])
					}
					for _, h := range n.requests("renew") {
						if h.at > tt.wantLostAt[0] {
							t.Errorf("renewal at %v after the loss at %v", h.at, tt.wantLostAt[0])
						}
					}
				} else if len(tt.wantLostAt) == 0 && k.Err() != nil {
					t.Errorf("Err() = %v, want nil", k.Err())
				}
				if err := k.Stop(context.Background()); err != nil {
					t.Errorf("Stop() error = %v", err)
				}
				rel := n.requests("release")
				if len(rel) != 1 || rel[0].lease != "lease-1" || rel[0].path != "/v1/leases/port/31450" {
					t.Errorf("release requests = %v, want one DELETE /v1/leases/port/31450 with the lease id", rel)
				}
			})
		})
	}
}

// TestPortLease_FailoverCostsOneRetry: the renewal goes to the new primary
// at the same instant the old one refuses; the lease id is unchanged.
func TestPortLease_FailoverCostsOneRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := twoHostsPrimaryA(t)
		k, rec := startLease(t, t.Context(), n, c, 31460, "lease-7", nil)
		time.Sleep(40 * time.Second)
		for _, kind := range []string{"primary", "renew", "release"} {
			n.setDefault(hostA+" "+kind, refused)
		}
		n.setPrimary(hostB, primaryOf(hostB, "b", 2))
		time.Sleep(30 * time.Second)
		if err := k.Stop(context.Background()); err != nil {
			t.Errorf("Stop() error = %v", err)
		}
		var got []string
		for _, h := range n.requests("renew") {
			got = append(got, h.at.String()+" "+h.host+" "+h.lease+" "+h.answer.String())
		}
		want := []string{"0s a.test lease-7 200", "30s a.test lease-7 200", "1m0s a.test lease-7 refused", "1m0s b.test lease-7 200"}
		if !slices.Equal(got, want) {
			t.Errorf("renewals = %q, want %q", got, want)
		}
		if rec.errors != 0 || len(rec.lost) != 0 {
			t.Errorf("errors = %d, lost = %v, want none", rec.errors, rec.lost)
		}
		if rel := n.requests("release"); len(rel) != 1 || rel[0].host != hostB {
			t.Errorf("release = %v, want one to b.test", rel)
		}
	})
}

// TestPortLease_FirstRenewal mirrors `const initial = await send(…); if
// (!initial.ok) throw new Error(`coordinator lease renewal HTTP ${initial.status}`)`.
func TestPortLease_FirstRenewal(t *testing.T) {
	tests := []struct {
		name       string
		answers    []outcome
		wantErr    bool
		wantStatus int
	}{
		{name: "200 starts", answers: []outcome{status(200)}},
		{name: "409 fails", answers: []outcome{status(409)}, wantErr: true, wantStatus: 409},
		{name: "404 fails", answers: []outcome{status(404)}, wantErr: true, wantStatus: 404},
		{name: "503 then 200 starts (beyond TS: one retry)", answers: []outcome{status(503), status(200)}},
		{name: "refused twice fails", answers: []outcome{refused, refused}, wantErr: true},
		{name: "timeout twice fails", answers: []outcome{hang, hang}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, c := oneHostPrimaryA(t)
				n.script(hostA+" renew", tt.answers...)
				n.setDefault(hostA+" renew", status(http.StatusTeapot))
				rec := &leaseRecorder{start: n.start}
				k, err := StartPortLease(t.Context(), 31499, "lease-1", testLeaseConfig(c, rec))
				if (err != nil) != tt.wantErr {
					t.Fatalf("StartPortLease() error = %v, wantErr %v", err, tt.wantErr)
				}
				if err != nil {
					if tt.wantStatus != 0 && StatusCode(err) != tt.wantStatus {
						t.Errorf("StartPortLease() error = %v, want status %d", err, tt.wantStatus)
					}
					return
				}
				if err := k.Stop(t.Context()); err != nil {
					t.Errorf("Stop() error = %v", err)
				}
			})
		})
	}
}

// TestFailover_NewClaimEndsBackoff: with FollowPrimary running, a new
// primary's claim ends a failure backoff at once — the first write after a
// failover comes with the claim, not when the backoff timer fires. Without a
// watcher (the tables above) the schedule is member.ts's.
func TestFailover_NewClaimEndsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := twoHostsPrimaryA(t)
		ctx, cancel := context.WithCancel(t.Context())
		followed := make(chan struct{})
		go func() { defer close(followed); c.FollowPrimary(ctx) }()
		hb := mustStartHeartbeat(t, ctx, testHeartbeatConfig(c, DefaultHeartbeatInterval))
		k, rec := startLease(t, ctx, n, c, 31450, "lease-1", nil)
		time.Sleep(20 * time.Second)
		// a dies; b has not won its election yet (it knows no primary).
		for _, kind := range []string{"primary", "heartbeat", "renew", "release"} {
			n.setDefault(hostA+" "+kind, refused)
		}
		n.setPrimary(hostB, wire.Primary{Known: false})
		time.Sleep(12 * time.Second) // both loops fail at 30 s and back off (heartbeat 30 s, lease 5 s)
		// b's claim is applied at 32 s.
		n.setPrimary(hostB, primaryOf(hostB, "b", 2))
		time.Sleep(30 * time.Second)
		hb.Stop()
		if err := k.Stop(context.Background()); err != nil {
			t.Errorf("Stop() error = %v", err)
		}
		cancel()
		<-followed
		for _, kind := range []string{"heartbeat", "renew"} {
			var got []string
			for _, h := range n.requests(kind) {
				got = append(got, h.at.String()+" "+h.host+" "+h.answer.String())
			}
			want := []string{"30s a.test refused", "30s a.test refused", "32s b.test 200", "1m2s b.test 200"}
			if kind == "renew" {
				want = append([]string{"0s a.test 200"}, want...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s requests = %q, want %q", kind, got, want)
			}
		}
		if len(rec.lost) != 0 {
			t.Errorf("lost = %v, want none", rec.lost)
		}
	})
}
