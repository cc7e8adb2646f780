package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/elanous/elanous-node/wire"
)

// Fences for downstream systems (ARCHITECTURE.md, "Fences for downstream").
// Every port grant carries a fence, the grant's log index, which increases
// strictly across the cluster: a later grant of any port carries a higher
// fence than every earlier one. A holder sends its fence with each request
// to a downstream service; the service refuses a fence lower than one it has
// already seen (Guard.Admit) and, before a dangerous action, may ask the
// cluster whether the fence is still current (Client.CheckFence,
// Guard.Confirm).

// ErrStaleFence is matched (errors.Is) by every *StaleFenceError: the
// cluster answered 409 stale-fence, or a Guard refused a fence lower than
// the highest it has admitted.
var ErrStaleFence = errors.New("stale fence")

// StaleFenceError is a refused fence.
type StaleFenceError struct {
	// Resource is the guarded resource ("" from Client.CheckFence).
	Resource string
	// Port is the port asked about (0 from Guard.Admit).
	Port int
	// Fence is the refused fence.
	Fence uint64
	// Current is what the fence was measured against: the guard's highest
	// admitted fence for the resource, or the fence of the port's live
	// lease; 0 when the port has no live lease.
	Current uint64
	// Reason says why, in words.
	Reason string
	// API is the cluster's 409 answer; nil for a guard's own refusal.
	API *APIError
}

// Error formats the refusal.
func (e *StaleFenceError) Error() string {
	what := fmt.Sprintf("fence %d", e.Fence)
	switch {
	case e.Resource != "":
		what += " for " + e.Resource
	case e.Port != 0:
		what += fmt.Sprintf(" on port %d", e.Port)
	}
	return what + " is stale: " + e.Reason
}

// Is matches ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// Unwrap returns the cluster's *APIError, if any, so StatusCode and
// ErrorCode see the 409.
func (e *StaleFenceError) Unwrap() error {
	if e.API == nil {
		return nil
	}
	return e.API
}

// CheckFence asks the cluster whether fence is the fence of the live lease
// on port (POST /v1/fences/check, query scope). The check is linearizable:
// whichever candidate answers, it never calls valid a fence the leader has
// moved past. A valid fence returns the lease's holder machine, generation
// and expiry; a stale one (released, expired, granted again, never granted)
// returns a *StaleFenceError whose Current is the port's live fence (0 when
// none). Any other error (ErrUnreachable, a 503, a 400 or 401) means the
// fence was not judged: treat it as not valid.
func (c *Client) CheckFence(ctx context.Context, port int, fence uint64) (wire.FenceCheck, error) {
	var out wire.FenceCheck
	var stale wire.StaleFence
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/fences/check",
		body: wire.FenceCheckRequest{Port: port, Fence: fence}, errBody: &stale}, &out)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Code == wire.CodeStaleFence {
		return wire.FenceCheck{}, &StaleFenceError{Port: port, Fence: fence, Current: stale.CurrentFence, Reason: apiErr.Message, API: apiErr}
	}
	if err == nil && (!out.Valid || out.Port != port || out.Fence != fence) {
		return wire.FenceCheck{}, fmt.Errorf("check fence %d on port %d: %w: answer %+v is not a valid check of that fence", fence, port, ErrInvalidResponse, out)
	}
	return out, err
}

// FenceChecker confirms a fence with the cluster; *Client is one.
type FenceChecker interface {
	CheckFence(ctx context.Context, port int, fence uint64) (wire.FenceCheck, error)
}

// FenceCheckerFunc adapts a function to FenceChecker.
type FenceCheckerFunc func(ctx context.Context, port int, fence uint64) (wire.FenceCheck, error)

// CheckFence calls f.
func (f FenceCheckerFunc) CheckFence(ctx context.Context, port int, fence uint64) (wire.FenceCheck, error) {
	return f(ctx, port, fence)
}

// Guard is the downstream half of fencing, for a service that receives
// fenced requests: per resource it keeps the highest fence it has admitted
// and refuses any lower one, with no round trip (the monotonic check). A
// paused holder that wakes after its lease was granted to another holder,
// whose requests reached the service first, is refused.
//
// The monotonic check alone admits a stale fence the service has not yet
// seen superseded (the new holder has not written yet). Confirm closes that
// gap for an action worth a round trip: it asks the cluster first.
//
// A resource is guarded by one port's leases: the fences it admits come
// from grants of that port. The zero Guard is ready to use; it is safe for
// concurrent use. Its memory grows with the number of resources; it is not
// persisted, so a restarted service should seed it (Observe) from what it
// stored.
type Guard struct {
	mu      sync.Mutex
	highest map[string]uint64 // guarded by mu
}

// Admit admits fence for resource if it is at least the highest fence
// admitted for it (the same holder may send its fence many times), and
// records it. A lower fence, or 0 (never granted), is refused with a
// *StaleFenceError. It makes no network call.
func (g *Guard) Admit(resource string, fence uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(resource, 0, fence); err != nil {
		return err
	}
	g.raiseLocked(resource, fence)
	return nil
}

// Confirm admits fence for resource only if the cluster confirms it is the
// fence of the live lease on port (checker is usually a *Client): first the
// monotonic check (a lower fence is refused without a round trip), then
// checker.CheckFence, then the monotonic check again with the fence
// recorded. When the cluster reports the port granted again, the guard
// raises the resource's highest fence to the current one, so later lower
// fences are refused locally. Any error means: do not act. An error that is
// not a *StaleFenceError (unreachable, 503) leaves the guard as it was.
func (g *Guard) Confirm(ctx context.Context, checker FenceChecker, resource string, port int, fence uint64) (wire.FenceCheck, error) {
	g.mu.Lock()
	err := g.refuseLocked(resource, port, fence)
	g.mu.Unlock()
	if err != nil {
		return wire.FenceCheck{}, err
	}
	check, err := checker.CheckFence(ctx, port, fence)
	g.mu.Lock()
	defer g.mu.Unlock()
	var stale *StaleFenceError
	switch {
	case errors.As(err, &stale):
		stale.Resource = resource
		g.raiseLocked(resource, stale.Current)
		return wire.FenceCheck{}, err
	case err != nil:
		return wire.FenceCheck{}, fmt.Errorf("confirm fence %d for %s on port %d: %w", fence, resource, port, err)
	}
	if err := g.refuseLocked(resource, port, fence); err != nil {
		return wire.FenceCheck{}, err // a higher fence was admitted meanwhile
	}
	g.raiseLocked(resource, fence)
	return check, nil
}

// Observe raises resource's highest fence to fence (never lowers it): for
// seeding a guard from fences a service stored before a restart.
func (g *Guard) Observe(resource string, fence uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.raiseLocked(resource, fence)
}

// Highest returns the highest fence admitted or observed for resource (0
// when none).
func (g *Guard) Highest(resource string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest[resource]
}

func (g *Guard) refuseLocked(resource string, port int, fence uint64) error {
	if fence == 0 {
		return &StaleFenceError{Resource: resource, Port: port, Reason: "fence 0 is never granted"}
	}
	if h := g.highest[resource]; fence < h {
		return &StaleFenceError{Resource: resource, Port: port, Fence: fence, Current: h,
			Reason: fmt.Sprintf("fence %d has already been admitted", h)}
	}
	return nil
}

func (g *Guard) raiseLocked(resource string, fence uint64) {
	if g.highest == nil {
		g.highest = map[string]uint64{}
	}
	if fence > g.highest[resource] {
		g.highest[resource] = fence
	}
}
