package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Heartbeat constants, from member.ts.
const (
	// DefaultHeartbeatInterval is the heartbeat period (DEFAULT_INTERVAL_MS),
	// also the base of the failure backoff.
	DefaultHeartbeatInterval = 30 * time.Second
	// MaxHeartbeatRetry caps the failure backoff (MAX_RETRY_MS).
	MaxHeartbeatRetry = 300 * time.Second
	// MaxHeartbeatInterval is the longest interval accepted (MAX_INTERVAL_MS).
	MaxHeartbeatInterval = MaxHeartbeatRetry
	// HeartbeatRequestTimeout bounds each request (REQUEST_TIMEOUT_MS).
	HeartbeatRequestTimeout = 5 * time.Second
	// ResourceTTL is the TTL registered resources carry (MAX_RETRY_MS * 2).
	ResourceTTL = 2 * MaxHeartbeatRetry
	// InstanceRefreshPeriod is how often the instance record is heartbeat too:
	// when heartbeats-since-refresh × interval reaches it.
	InstanceRefreshPeriod = MaxHeartbeatRetry
)

// Clock supplies the wall-clock time the member loops stamp records with and
// compute deadlines from (the TypeScript `now` option). Timers are not part
// of it: they use the runtime's clock, which testing/synctest fakes.
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the real wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Resource names a machine or an instance a member registers.
type Resource struct {
	// ID is the resource id, e.g. "machine:mbp" or "instance:mbp/1".
	ID string
	// Name is the display name; for the machine it is also the `machine`
	// field of both records (the name a machine token is limited to).
	Name string
	// Attrs are extra attributes; each value must encode as JSON. The
	// machine's "load" is always replaced by the measured load.
	Attrs map[string]any
}

// HeartbeatConfig configures StartHeartbeat.
type HeartbeatConfig struct {
	// Client sends the requests (usually with a Resolver, so failovers are
	// followed). Required.
	Client *Client
	// Machine is registered with kind "machine" and heartbeat with its load.
	Machine Resource
	// Instance is registered with kind "instance" and Endpoint, and refreshed
	// every InstanceRefreshPeriod.
	Instance Resource
	// Endpoint is the instance's endpoint. Required.
	Endpoint string
	// Interval is the heartbeat period: 0 means DefaultHeartbeatInterval; it
	// must not exceed MaxHeartbeatInterval.
	Interval time.Duration
	// Clock stamps observedAt; nil means SystemClock.
	Clock Clock
	// Logger receives one warning each time the failure reason changes; nil
	// discards. No token is ever logged.
	Logger *slog.Logger
	// Measure returns the machine's load; nil means MeasureLoad.
	Measure func(now time.Time) Load
}

// Heartbeat is a running member heartbeat loop (member.ts
// startMemberHeartbeat). Its state belongs to its goroutine.
type Heartbeat struct {
	cfg           HeartbeatConfig
	machineAttrs  map[string]json.RawMessage
	instanceAttrs map[string]json.RawMessage
	log           *slog.Logger
	cancel        context.CancelFunc
	done          chan struct{}

	// Loop state, touched only by the loop goroutine.
	registered   bool
	sinceRefresh int
	failures     int
	lastFailure  string
	recordLost   bool // the last attempt got a 404 on a heartbeat
}

// StartHeartbeat validates cfg and starts registering the machine and the
// instance at once, then heartbeating every interval, in a goroutine; the
// caller never waits for the network. The loop runs until ctx is cancelled or
// Stop is called.
//
// Each round: when not registered, register the machine (kind "machine",
// attrs merged with the measured load) and then the instance (kind
// "instance", endpoint), both with owner "", observedAt now and ttlMs
// 600000; otherwise heartbeat the machine with {attrs:{load}} and, when
// heartbeats since the last refresh × interval reach 300 s, the instance
// with {}. A success schedules the next round after interval. A 404 on a
// heartbeat marks the records lost and re-registers at once. Any other
// failure retries after min(300 s, min(interval, 30 s)·2^(failures−1)).
// Beyond member.ts, a request that fails unreachable or with 503 is retried
// once at once after re-resolving the primary, before it counts as a
// failure; and when the client follows the primary (Client.FollowPrimary), a
// newly claimed primary ends a failure backoff at once.
func StartHeartbeat(ctx context.Context, cfg HeartbeatConfig) (*Heartbeat, error) {
	if cfg.Client == nil {
		return nil, errors.New("start heartbeat: no client")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultHeartbeatInterval
	}
	if cfg.Interval < 0 || cfg.Interval > MaxHeartbeatInterval {
		return nil, fmt.Errorf("start heartbeat: invalid member heartbeat interval %v (want up to %v)", cfg.Interval, MaxHeartbeatInterval)
	}
	if cfg.Machine.ID == "" || cfg.Machine.Name == "" || cfg.Instance.ID == "" || cfg.Endpoint == "" {
		return nil, errors.New("start heartbeat: missing member configuration (machine id and name, instance id and endpoint are required)")
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Measure == nil {
		cfg.Measure = MeasureLoad
	}
	h := &Heartbeat{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if h.machineAttrs, err = encodeAttrs(cfg.Machine.Attrs); err != nil {
		return nil, fmt.Errorf("start heartbeat: machine attrs: %w", err)
	}
	if h.instanceAttrs, err = encodeAttrs(cfg.Instance.Attrs); err != nil {
		return nil, fmt.Errorf("start heartbeat: instance attrs: %w", err)
	}
	ctx, h.cancel = context.WithCancel(ctx)
	go h.run(ctx)
	return h, nil
}

// Stop ends the loop, aborting a request in flight, and returns once the
// loop goroutine has exited. It is safe to call more than once.
func (h *Heartbeat) Stop() {
	h.cancel()
	<-h.done
}

// Done is closed when the loop has exited (after Stop or ctx cancellation).
func (h *Heartbeat) Done() <-chan struct{} { return h.done }

// run is the loop: a round at once (member.ts queueMicrotask), then one per
// scheduled delay.
func (h *Heartbeat) run(ctx context.Context) {
	defer close(h.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var wake <-chan struct{} // set during a failure backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
			// Beyond member.ts: a new primary was claimed while backing
			// off; try it now rather than when the backoff ends.
			timer.Stop()
		}
		changed := h.cfg.Client.PrimaryChanged()
		delay, ok := h.round(ctx)
		if !ok {
			return
		}
		wake = nil
		if h.failures > 0 {
			wake = changed // a claim seen during the failed round wakes at once
		}
		timer.Reset(delay)
	}
}

// round runs one tick and returns the delay before the next; ok is false
// once ctx is done.
func (h *Heartbeat) round(ctx context.Context) (time.Duration, bool) {
	err := h.attempt(ctx)
	if ctx.Err() != nil {
		return 0, false
	}
	if err == nil {
		if h.failures > 0 {
			h.log.Info("member heartbeat recovered", "machine", h.cfg.Machine.ID, "failures", h.failures)
		}
		h.failures = 0
		return h.cfg.Interval, true
	}
	reason := failureReason(err)
	h.failures++
	delay := heartbeatBackoff(h.cfg.Interval, h.failures)
	if h.recordLost {
		// member.ts: a lost record needs immediate re-registration.
		delay = 0
	}
	if reason != h.lastFailure {
		h.log.Warn("member heartbeat failed", "machine", h.cfg.Machine.ID, "reason", reason,
			"error", err.Error(), "retry_in", delay.String())
	}
	h.lastFailure = reason
	return delay, true
}

// attempt is member.ts tick's try block.
func (h *Heartbeat) attempt(ctx context.Context) error {
	h.recordLost = false
	if !h.registered {
		return h.register(ctx)
	}
	load := h.cfg.Measure(h.cfg.Clock.Now())
	err := h.call(ctx, true, func(rctx context.Context) error {
		_, err := h.cfg.Client.HeartbeatResource(rctx, h.cfg.Machine.ID, map[string]json.RawMessage{"load": load.raw()})
		return err
	})
	if err != nil {
		return err
	}
	h.sinceRefresh++
	if time.Duration(h.sinceRefresh)*h.cfg.Interval >= InstanceRefreshPeriod {
		err := h.call(ctx, true, func(rctx context.Context) error {
			_, err := h.cfg.Client.HeartbeatResource(rctx, h.cfg.Instance.ID, nil)
			return err
		})
		if err != nil {
			return err
		}
		h.sinceRefresh = 0
	}
	return nil
}

// register registers the machine, then the instance.
func (h *Heartbeat) register(ctx context.Context) error {
	now := h.cfg.Clock.Now()
	attrs := make(map[string]json.RawMessage, len(h.machineAttrs)+1)
	for k, v := range h.machineAttrs {
		attrs[k] = v
	}
	attrs["load"] = h.cfg.Measure(now).raw()
	machine := wire.RegisterRequest{
		ID: h.cfg.Machine.ID, Kind: "machine", Name: h.cfg.Machine.Name, Machine: h.cfg.Machine.Name,
		Owner: "", Attrs: attrs, ObservedAt: now.UnixMilli(), TTLMs: ResourceTTL.Milliseconds(),
	}
	if err := h.call(ctx, false, func(rctx context.Context) error {
		_, err := h.cfg.Client.Register(rctx, machine)
		return err
	}); err != nil {
		return err
	}
	instance := wire.RegisterRequest{
		ID: h.cfg.Instance.ID, Kind: "instance", Name: h.cfg.Instance.Name, Machine: h.cfg.Machine.Name,
		Owner: "", Endpoint: h.cfg.Endpoint, Attrs: h.instanceAttrs,
		ObservedAt: h.cfg.Clock.Now().UnixMilli(), TTLMs: ResourceTTL.Milliseconds(),
	}
	if err := h.call(ctx, false, func(rctx context.Context) error {
		_, err := h.cfg.Client.Register(rctx, instance)
		return err
	}); err != nil {
		return err
	}
	h.registered = true
	h.sinceRefresh = 0
	h.log.Info("member registered", "machine", h.cfg.Machine.ID, "instance", h.cfg.Instance.ID)
	return nil
}

// call sends one request under HeartbeatRequestTimeout; after an unreachable
// server or a 503 it re-resolves the primary and sends it once more. A 404
// on a heartbeat marks the records lost (member.ts: registered = false).
func (h *Heartbeat) call(ctx context.Context, heartbeat bool, send func(context.Context) error) error {
	err := sendWithin(ctx, HeartbeatRequestTimeout, send)
	if err != nil && ctx.Err() == nil && IsRetryable(err) {
		if addr, rerr := h.cfg.Client.Reresolve(ctx); rerr != nil {
			h.log.Debug("member re-resolve failed", "error", rerr.Error())
		} else {
			h.log.Debug("member re-resolved primary", "url", addr.URL, "holder", addr.Holder, "generation", addr.Generation)
		}
		if ctx.Err() == nil {
			err = sendWithin(ctx, HeartbeatRequestTimeout, send)
		}
	}
	if heartbeat && IsNotFound(err) {
		h.registered = false
		h.recordLost = true
	}
	return err
}

// sendWithin runs send under a timeout derived from ctx. A 2xx answer whose
// body does not decode counts as success: like the TypeScript client, the
// loops look only at the status.
func sendWithin(ctx context.Context, timeout time.Duration, send func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := send(rctx)
	if errors.Is(err, ErrInvalidResponse) {
		return nil
	}
	return err
}

// failureReason names a failure as member.ts does: "http-<status>" for an
// answer, "network-or-timeout" for anything that got none.
func failureReason(err error) string {
	if status := StatusCode(err); status != 0 {
		return "http-" + strconv.Itoa(status)
	}
	if errors.Is(err, ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
		return "network-or-timeout"
	}
	return "unknown"
}

// heartbeatBackoff is member.ts's retry delay after the failures-th failure
// in a row: min(300 s, min(interval, 30 s) · 2^(failures−1)).
func heartbeatBackoff(interval time.Duration, failures int) time.Duration {
	delay := min(interval, DefaultHeartbeatInterval)
	for i := 1; i < failures && delay < MaxHeartbeatRetry; i++ {
		delay *= 2
	}
	return min(delay, MaxHeartbeatRetry)
}

// encodeAttrs encodes attribute values once, up front.
func encodeAttrs(attrs map[string]any) (map[string]json.RawMessage, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(attrs))
	for k, v := range attrs {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("attr %q: %w", k, err)
		}
		out[k] = data
	}
	return out, nil
}
