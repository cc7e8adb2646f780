package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Port-lease constants, from port-lease-heartbeat.ts and ports.ts.
const (
	// DefaultLeaseInterval is the renewal period (RENEW_MS).
	DefaultLeaseInterval = 30 * time.Second
	// DefaultLeaseRetry is the delay before retrying a failed renewal (RETRY_MS).
	DefaultLeaseRetry = 5 * time.Second
	// DefaultLeaseTTL is the lease TTL the keeper assumes (PORT_LEASE_TTL_MS).
	DefaultLeaseTTL = 600 * time.Second
	// LeaseExpiryMargin is how long before the server could expire the lease
	// the keeper gives it up (EXPIRY_MARGIN_MS), for request and shutdown time.
	LeaseExpiryMargin = 10 * time.Second
	// LeaseRequestTimeout bounds each renewal and release request.
	LeaseRequestTimeout = time.Second
	// DefaultBandStart and DefaultBandEnd bound the test band (inclusive).
	DefaultBandStart = 31450
	DefaultBandEnd   = 31499
)

// Band is an inclusive range of ports.
type Band struct {
	Start, End int
}

// Contains reports whether port lies in the band.
func (b Band) Contains(port int) bool { return port >= b.Start && port <= b.End }

// PortLeaseConfig configures StartPortLease. Zero durations take the
// defaults.
type PortLeaseConfig struct {
	// Client sends the renewals; any candidate forwards them. Required.
	Client *Client
	// Band is the test band the port must lie in; zero means 31450–31499.
	Band Band
	// Interval is the renewal period (default 30 s); it must be below
	// TTL − Margin.
	Interval time.Duration
	// Retry is the delay after a failed renewal (default 5 s), shortened so
	// the retry happens before the deadline.
	Retry time.Duration
	// TTL is the lease's TTL as acquired (default 600 s).
	TTL time.Duration
	// Margin is taken off TTL to form the deadline; zero means the smaller of
	// 10 s and TTL/3 (10 s for the default TTL; a short test TTL keeps room).
	Margin time.Duration
	// Clock gives the times the deadline is computed from; nil means
	// SystemClock.
	Clock Clock
	// Logger receives a warning when the lease is lost; nil discards.
	Logger *slog.Logger
	// OnError, if set, sees every failed renewal (after the retry). A panic
	// in it is recovered: reporting must not stop renewal.
	OnError func(error)
	// OnLeaseLost is called exactly once, in its own goroutine, when the lease
	// is lost: on 400, 403, 404 or 409, or when no renewal succeeded before
	// the deadline (ErrLeaseDeadline). Required.
	OnLeaseLost func(error)
}

// PortLeaseKeeper keeps one port lease renewed (port-lease-heartbeat.ts
// startPortLeaseHeartbeat). Create it with StartPortLease; release it with
// Stop.
type PortLeaseKeeper struct {
	port    int
	leaseID string
	cfg     PortLeaseConfig
	log     *slog.Logger

	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	idle     chan struct{} // closed when the loop has exited and no renewal is in flight
	lost     chan struct{} // closed when the lease is lost

	mu      sync.Mutex
	lostErr error // guarded by mu

	releaseOnce sync.Once
	releaseErr  error

	lastSuccess time.Time // touched only by StartPortLease, then the loop
}

// StartPortLease checks its arguments as port-lease-heartbeat.ts does (port
// inside the band, non-empty lease id, 0 < interval < TTL − margin, retry >
// 0), then renews the lease once and returns an error if that first renewal
// fails. From then on it renews every Interval in a goroutine; after a
// failure it retries after min(Retry, deadline − now), where deadline = last
// success + TTL − Margin. The lease is lost — OnLeaseLost once, renewals
// stop — on a 400, 403, 404 or 409, when the deadline passes, or when a
// success arrives after it. Beyond the TypeScript client (which always talks
// to the local candidate), renewals go through cfg.Client, and an
// unreachable server or a 503 is retried once at once after re-resolving the
// primary, and a retry waiting after a failure happens at once when the
// client sees a new primary claimed (Client.FollowPrimary).
//
// Cancelling ctx stops the renewals without releasing the lease; Stop
// releases it.
func StartPortLease(ctx context.Context, port int, leaseID string, cfg PortLeaseConfig) (*PortLeaseKeeper, error) {
	if cfg.Band == (Band{}) {
		cfg.Band = Band{Start: DefaultBandStart, End: DefaultBandEnd}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultLeaseInterval
	}
	if cfg.Retry == 0 {
		cfg.Retry = DefaultLeaseRetry
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.Margin == 0 {
		cfg.Margin = min(LeaseExpiryMargin, cfg.TTL/3)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	switch {
	case cfg.Client == nil:
		return nil, errors.New("start port lease: no client")
	case cfg.OnLeaseLost == nil:
		return nil, errors.New("start port lease: no OnLeaseLost callback")
	case !cfg.Band.Contains(port):
		return nil, fmt.Errorf("start port lease: invalid coordinator lease port %d (band %d-%d)", port, cfg.Band.Start, cfg.Band.End)
	case strings.TrimSpace(leaseID) == "":
		return nil, errors.New("start port lease: missing coordinator lease id")
	case cfg.Interval <= 0 || cfg.Interval >= cfg.TTL-cfg.Margin || cfg.Retry <= 0 || cfg.Margin < 0:
		return nil, fmt.Errorf("start port lease: invalid coordinator renewal interval %v (want 0 < interval < ttl %v - margin %v, retry > 0)",
			cfg.Interval, cfg.TTL, cfg.Margin)
	}
	k := &PortLeaseKeeper{
		port: port, leaseID: leaseID, cfg: cfg, log: cfg.Logger,
		stop: make(chan struct{}), idle: make(chan struct{}), lost: make(chan struct{}),
	}
	if k.log == nil {
		k.log = slog.New(slog.DiscardHandler)
	}
	startedAt := cfg.Clock.Now()
	if err := k.renew(ctx); err != nil {
		return nil, fmt.Errorf("start port lease: %w", err)
	}
	confirmedAt := cfg.Clock.Now()
	if !confirmedAt.Before(startedAt.Add(cfg.TTL - cfg.Margin)) {
		return nil, fmt.Errorf("start port lease %d: %w", port, ErrLeaseDeadline)
	}
	k.lastSuccess = confirmedAt
	go k.run(ctx)
	return k, nil
}

// Port returns the leased port.
func (k *PortLeaseKeeper) Port() int { return k.port }

// LeaseID returns the lease id renewals carry.
func (k *PortLeaseKeeper) LeaseID() string { return k.leaseID }

// Lost is closed when the lease is lost.
func (k *PortLeaseKeeper) Lost() <-chan struct{} { return k.lost }

// Err returns why the lease was lost, or nil while it is held.
func (k *PortLeaseKeeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostErr
}

// Stop ends the renewals, waits for a renewal in flight to finish, then
// releases the lease (DELETE /v1/leases/port/{port}); a 403 or 404 answer
// counts as released. It releases even a lost lease, as the TypeScript
// client does. Later calls return the first call's result. ctx bounds the
// wait and the release.
func (k *PortLeaseKeeper) Stop(ctx context.Context) error {
	k.stopOnce.Do(func() { close(k.stop) })
	select {
	case <-k.idle:
	case <-ctx.Done():
		return fmt.Errorf("stop port lease %d: %w", k.port, ctx.Err())
	}
	k.releaseOnce.Do(func() { k.releaseErr = k.release(ctx) })
	return k.releaseErr
}

// release sends the DELETE, retrying once after re-resolving on an
// unreachable server or a 503.
func (k *PortLeaseKeeper) release(ctx context.Context) error {
	send := func(rctx context.Context) error { return k.cfg.Client.ReleasePortLease(rctx, k.port, k.leaseID) }
	err := sendWithin(ctx, LeaseRequestTimeout, send)
	if err != nil && ctx.Err() == nil && IsRetryable(err) {
		_, _ = k.cfg.Client.Reresolve(ctx)
		err = sendWithin(ctx, LeaseRequestTimeout, send)
	}
	if err == nil || IsStatus(err, http.StatusForbidden, http.StatusNotFound) {
		return nil
	}
	return fmt.Errorf("release port lease %d: %w", k.port, err)
}

// renew sends one renewal under LeaseRequestTimeout, and once more after
// re-resolving when the server was unreachable or answered 503.
func (k *PortLeaseKeeper) renew(ctx context.Context) error {
	send := func(rctx context.Context) error {
		_, err := k.cfg.Client.RenewPortLease(rctx, k.port, k.leaseID)
		return err
	}
	err := sendWithin(ctx, LeaseRequestTimeout, send)
	if err != nil && ctx.Err() == nil && IsRetryable(err) && !k.stopping() {
		if addr, rerr := k.cfg.Client.Reresolve(ctx); rerr == nil {
			k.log.Debug("port lease re-resolved primary", "port", k.port, "url", addr.URL, "generation", addr.Generation)
		}
		if ctx.Err() == nil {
			err = sendWithin(ctx, LeaseRequestTimeout, send)
		}
	}
	if err != nil {
		return fmt.Errorf("renew port lease %d: %w", k.port, err)
	}
	return nil
}

// stopping reports whether Stop was called; a renewal in flight then does not retry.
func (k *PortLeaseKeeper) stopping() bool {
	select {
	case <-k.stop:
		return true
	default:
		return false
	}
}

// deadline is last success + TTL − margin.
func (k *PortLeaseKeeper) deadline() time.Time {
	return k.lastSuccess.Add(k.cfg.TTL - k.cfg.Margin)
}

// run drives the renewals until the lease is lost, Stop or ctx ends them,
// then waits for a renewal in flight and closes idle.
func (k *PortLeaseKeeper) run(ctx context.Context) {
	defer close(k.idle)
	renewTimer := time.NewTimer(k.cfg.Interval)
	defer renewTimer.Stop()
	deadlineTimer := time.NewTimer(time.Hour)
	defer deadlineTimer.Stop()
	if !k.armDeadline(deadlineTimer) {
		return
	}
	var results chan error      // non-nil while a renewal is in flight
	var changed <-chan struct{} // PrimaryChanged as the renewal in flight started
	var wake <-chan struct{}    // set while waiting to retry a failed renewal
	defer func() {
		if results != nil {
			<-results //nolint:errcheck // Stop releases only after the renewal in flight finished; its outcome no longer matters
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.stop:
			return
		case <-deadlineTimer.C:
			k.markLost(fmt.Errorf("port lease %d: %w", k.port, ErrLeaseDeadline))
			return
		case <-renewTimer.C:
			if !k.cfg.Clock.Now().Before(k.deadline()) {
				// The deadline timer is due at this same instant; it wins, as
				// the earlier-armed timer does in the TypeScript event loop.
				k.markLost(fmt.Errorf("port lease %d: %w", k.port, ErrLeaseDeadline))
				return
			}
			wake = nil
			changed = k.cfg.Client.PrimaryChanged()
			ch := make(chan error, 1)
			results = ch
			go func() { ch <- k.renew(ctx) }()
		case <-wake:
			// Beyond the TypeScript client: a new primary was claimed while
			// waiting to retry; retry now.
			wake = nil
			renewTimer.Reset(0)
		case err := <-results:
			results = nil
			if !k.handle(ctx, err, renewTimer, deadlineTimer) {
				return
			}
			if err != nil {
				wake = changed
			}
		}
	}
}

// handle applies one renewal's outcome; it returns false once the lease is
// lost (or ctx ended it).
func (k *PortLeaseKeeper) handle(ctx context.Context, err error, renewTimer, deadlineTimer *time.Timer) bool {
	if ctx.Err() != nil {
		return false
	}
	if err == nil {
		receivedAt := k.cfg.Clock.Now()
		if !receivedAt.Before(k.deadline()) {
			// A success that arrives after the deadline cannot be trusted:
			// the server may already have handed the port to someone else.
			k.markLost(fmt.Errorf("port lease %d: %w", k.port, ErrLeaseDeadline))
			return false
		}
		k.lastSuccess = receivedAt
		if !k.armDeadline(deadlineTimer) {
			return false
		}
		renewTimer.Reset(k.cfg.Interval)
		return true
	}
	k.reportError(err)
	now := k.cfg.Clock.Now()
	if !now.Before(k.deadline()) ||
		IsStatus(err, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict) {
		k.markLost(err)
		return false
	}
	renewTimer.Reset(min(k.cfg.Retry, k.deadline().Sub(now)))
	return true
}

// armDeadline sets the deadline timer from the last success, or marks the
// lease lost if the deadline has already passed.
func (k *PortLeaseKeeper) armDeadline(t *time.Timer) bool {
	remaining := k.deadline().Sub(k.cfg.Clock.Now())
	if remaining <= 0 {
		k.markLost(fmt.Errorf("port lease %d: %w", k.port, ErrLeaseDeadline))
		return false
	}
	t.Reset(remaining)
	return true
}

// markLost records the loss and calls OnLeaseLost in its own goroutine, so
// the callback may call Stop. The loop calls it at most once.
func (k *PortLeaseKeeper) markLost(err error) {
	k.mu.Lock()
	k.lostErr = err
	k.mu.Unlock()
	close(k.lost)
	k.log.Warn("port lease lost", "port", k.port, "error", err.Error())
	go k.cfg.OnLeaseLost(err)
}

// reportError passes a failed renewal to OnError, recovering a panic in it.
func (k *PortLeaseKeeper) reportError(err error) {
	if k.cfg.OnError == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			k.log.Error("port lease OnError panicked", "panic", fmt.Sprint(r))
		}
	}()
	k.cfg.OnError(err)
}
