package member

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Watch timing.
const (
	// WatchWait is the wait of each blocking /v1/primary query.
	WatchWait = 30 * time.Second
	// watchPollInterval spaces queries to a server that answers without an
	// X-Elanous-Index header or at once with an unchanged index (one that
	// does not block).
	watchPollInterval = time.Second
	// watchMaxBackoff caps the delay after repeated failures to reach a candidate.
	watchMaxBackoff = 30 * time.Second
)

// WatchPrimary follows the primary claim until ctx ends and returns ctx's
// error (or a validation error from NewResolver at once). Each candidate is
// watched with blocking queries — GET /v1/primary, then
// GET /v1/primary?index=N&wait=30s with N its last X-Elanous-Index — so a new
// claim is seen as soon as any candidate applies it. fn is called, never
// concurrently, with every answer that passes the Resolve rules and carries
// a higher generation than the last one reported; the URL it carries is the
// configured address of the holder.
func WatchPrimary(ctx context.Context, candidates []Candidate, fn func(wire.Primary)) error {
	r, err := NewResolver(ResolverConfig{Candidates: candidates, Role: ScopeQuery})
	if err != nil {
		return err
	}
	return r.WatchPrimary(ctx, fn)
}

// WatchPrimary is the package function WatchPrimary over r's candidates, with
// r's HTTP client. When a refresh replaces the candidates (Learn), the
// watchers move to the new list; the highest generation reported so far
// still holds.
func (r *Resolver) WatchPrimary(ctx context.Context, fn func(wire.Primary)) error {
	var best wire.Primary
	for {
		v := r.view()
		if len(v.candidates) == 0 {
			return ErrNoCandidates
		}
		if err := r.watchView(ctx, v, &best, fn); err != nil {
			return err
		}
	}
}

// watchView watches the candidates of v until ctx ends (its error) or v is
// replaced (nil).
func (r *Resolver) watchView(ctx context.Context, v *resolverView, best *wire.Primary, fn func(wire.Primary)) error {
	wctx, cancel := context.WithCancel(ctx)
	replies := make(chan primaryReply)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, c := range v.candidates {
		wg.Go(func() { r.watchCandidate(wctx, c.URL, replies) })
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-v.replaced:
			return nil
		case reply := <-replies:
			holder := holderIndex(v.candidates, reply)
			if holder < 0 || reply.generation <= best.Generation {
				continue
			}
			*best = primaryFromReply(v.candidates[holder], reply)
			fn(*best)
		}
	}
}

// watchCandidate runs the blocking-query loop against one candidate and
// sends every valid answer to out.
func (r *Resolver) watchCandidate(ctx context.Context, base string, out chan<- primaryReply) {
	var index uint64
	failures := 0
	for ctx.Err() == nil {
		timeout := r.timeout
		if index > 0 {
			timeout += WatchWait
		}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		started := time.Now()
		reply, next, err := r.queryPrimary(qctx, base, index, WatchWait)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			index = 0
			if !sleepCtx(ctx, watchBackoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		if reply.valid {
			select {
			case out <- reply:
			case <-ctx.Done():
				return
			}
		}
		switch {
		case next == 0:
			// No blocking support: poll.
			index = 0
			if !sleepCtx(ctx, watchPollInterval) {
				return
			}
		case next < index:
			// The index went backwards (a restored or rebuilt cluster): start over.
			index = 0
		case next == index && index > 0 && time.Since(started) < watchPollInterval:
			// An unchanged index answered at once: the server did not block.
			if !sleepCtx(ctx, watchPollInterval) {
				return
			}
		default:
			index = next
		}
	}
}

// watchBackoff is min(30 s, 1 s · 2^(failures−1)).
func watchBackoff(failures int) time.Duration {
	d := time.Second
	for i := 1; i < failures && d < watchMaxBackoff; i++ {
		d *= 2
	}
	return min(d, watchMaxBackoff)
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// FollowPrimary keeps the client's target on the primary with WatchPrimary
// until ctx ends, so requests go to a new primary as soon as its claim is
// applied rather than after a failed request; each move closes the channel
// PrimaryChanged returned, waking heartbeat and lease loops in a failure
// backoff. A newly claimed primary for
// which no token may be sent is not adopted (the current target forwards).
// It returns ctx's error, or an error at once for a client with a fixed
// address.
func (c *Client) FollowPrimary(ctx context.Context) error {
	if c.resolver == nil {
		return errors.New("follow primary: the client has a fixed address")
	}
	return c.resolver.WatchPrimary(ctx, func(p wire.Primary) {
		addr, err := c.resolver.AddressFor(p.URL)
		if err != nil || (addr.Token == "" && c.resolver.needsToken()) {
			return
		}
		addr.Holder, addr.Generation = p.Holder, p.Generation
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.resolved || addr.Generation >= c.target.Generation || c.target.Generation == 0 {
			c.target, c.resolved = addr, true
			close(c.changed)
			c.changed = make(chan struct{})
		}
	})
}
