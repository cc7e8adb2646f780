package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// forwardedHeaders are the request headers a forward carries to the leader.
var forwardedHeaders = []string{"Authorization", "Content-Type", wire.HeaderPortLeaseID, wire.HeaderIdempotencyKey, "Accept"}

// copiedHeaders are the response headers copied back from the leader.
var copiedHeaders = []string{"Content-Type", "Retry-After", "WWW-Authenticate", wire.HeaderGeneration, wire.HeaderIndex, wire.HeaderKnownLeader, wire.HeaderLastContactMs}

// errForwarded is returned up the handler chain once a request has been
// forwarded to the leader and its answer written; withRoute turns it into
// success.
var errForwarded = errors.New("forwarded to the leader")

// leaderOnly is the write middleware. It runs after authentication and before
// the handler: the body is read once (64 KiB at most) and, unless this node
// is the ready leader, the request is forwarded as received to the leader
// and its answer copied back; only the leader decodes, validates, draws and
// proposes. With no leader it waits for one up to the route's leader wait,
// then forwards, serves, or answers 503 no-leader (or not-ready).
func (s *Server) leaderOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, err := readBody(c); err != nil {
			return err
		}
		if err := s.onLeader(c, func(context.Context) error { return s.leading() }); err != nil {
			return err
		}
		return next(c)
	}
}

// withBody is the renewal routes' write middleware: it reads the body once
// (64 KiB at most), so that the handler may forward it, and leaves the
// decision to the handler (Server.renew).
func withBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, err := readBody(c); err != nil {
			return err
		}
		return next(c)
	}
}

// leading returns nil when this node is the leader and its claim is applied
// (it may propose), ErrNotLeader when another node leads, and ErrNoLeader or
// ErrNotReady otherwise. Propose decides again; this is the cheap check that
// spares a follower the handler's work.
func (s *Server) leading() error {
	leader, ok := s.node.Leader()
	switch {
	case !ok && s.node.Waiting():
		return errWaiting
	case !ok:
		return cluster.ErrNoLeader
	case leader.Machine != s.node.ID():
		return cluster.ErrNotLeader
	case !s.node.Ready():
		return cluster.ErrNotReady
	}
	return nil
}

// onLeader is the one retry-and-forward loop of writes and consistent reads.
// It runs op (a leadership check, a Propose or a ReadIndex), which succeeds
// only on the ready leader. On ErrNotLeader the request is forwarded to the
// leader and errForwarded returned (the answer is written), unless it was
// itself forwarded: a node never forwards twice. On ErrNoLeader or
// ErrNotReady it waits for a leader until the request's leader wait and
// tries again. Any other error (a domain error, outcome-unknown) is
// returned as is. op runs under the request's budget.
func (s *Server) onLeader(c echo.Context, op func(ctx context.Context) error) error {
	return s.onLeaderVia(c, s.forward, op)
}

// onLeaderVia is onLeader with the forward it makes on ErrNotLeader: forward
// (a body held in memory) for every route but the snapshot routes, whose
// bodies stream through (forwardStream).
func (s *Server) onLeaderVia(c echo.Context, forward func(context.Context, echo.Context) error, op func(ctx context.Context) error) error {
	deadline, leaderUntil := budgetOf(c)
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	for {
		err := op(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, cluster.ErrNotLeader):
			if c.Request().Header.Get(wire.HeaderForwarded) != "" {
				return fmt.Errorf("%w: forwarded request reached a follower", cluster.ErrNoLeader)
			}
			if err := forward(ctx, c); err != nil {
				return err
			}
			return errForwarded
		case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrNotReady):
			if !s.waitForLeader(ctx, leaderUntil) {
				return err
			}
		default:
			return err
		}
	}
}

// waitForLeader polls until a leader is known (or this node is ready) or until.
func (s *Server) waitForLeader(ctx context.Context, until time.Time) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if _, ok := s.node.Leader(); ok && (!s.node.IsLeader() || s.node.Ready()) {
			return true
		}
	}
	return false
}

// maxAnswerBytes bounds an answer copied back from the leader.
const maxAnswerBytes = 64 << 20

// forward sends the request, with its body as received and its credentials,
// to the leader and copies the answer back. A connection refused means
// nothing was sent: 503 no-leader. A failure after sending is 503
// outcome-unknown for a write.
//
// A successful write answer carries the index of the entry that made the
// change (X-Elanous-Index). Before copying it back, this node waits until its
// own state machine has applied that index, so the caller's next local read
// here sees the write (read-your-writes). The wait is bounded by the
// request's budget; when it runs out the answer is still given (the write
// happened) and elanous_forward_unapplied_total counts it. A refused write
// (4xx) changed nothing and is copied back at once.
func (s *Server) forward(ctx context.Context, c echo.Context) error {
	leader, ok := s.node.Leader()
	if !ok {
		return cluster.ErrNoLeader
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	resp, err := sendForward(ctx, s.client, c.Request(), body, leader, s.node.ID())
	s.metrics.forwards.WithLabelValues(forwardResult(err)).Inc()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer := io.LimitReader(resp.Body, maxAnswerBytes)
	if rt := routeOf(c); rt != nil && rt.write {
		if index, ok := writeIndex(resp); ok {
			// Read the answer first: the wait may use up the context the
			// body is read under.
			data, err := io.ReadAll(answer)
			if err != nil {
				return fmt.Errorf("%w: read the leader's answer to a write it applied: %v", cluster.ErrOutcomeUnknown, err)
			}
			if !s.awaitApplied(ctx, index, rt.table) && c.Request().Context().Err() == nil {
				s.metrics.unapplied.Inc() // the budget ran out, not the client
			}
			answer = bytes.NewReader(data)
		}
	}
	for _, h := range copiedHeaders {
		if v := resp.Header.Get(h); v != "" {
			c.Response().Header().Set(h, v)
		}
	}
	c.Response().WriteHeader(resp.StatusCode)
	_, err = io.Copy(c.Response(), answer)
	return err
}

// writeIndex returns the index of the entry a successful write answer
// reports, if it is one.
func writeIndex(resp *http.Response) (uint64, bool) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, false
	}
	index, err := strconv.ParseUint(resp.Header.Get(wire.HeaderIndex), 10, 64)
	return index, err == nil && index > 0
}

// awaitApplied waits until this node's state machine has applied index, or
// until ctx ends; it reports whether the index was reached. It wakes when
// table changes (the write changed it, as most entries do) and checks every
// appliedPoll as well, for an entry that changes no table (an acquire
// answered from its Idempotency-Key).
func (s *Server) awaitApplied(ctx context.Context, index uint64, table fsm.Table) bool {
	f := s.node.FSM()
	var tick *time.Ticker
	for {
		_, changed := f.Watch(table)
		if f.AppliedIndex() >= index {
			return true
		}
		if tick == nil {
			tick = time.NewTicker(appliedPoll)
			defer tick.Stop()
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}

// appliedPoll is awaitApplied's fallback check interval.
const appliedPoll = 5 * time.Millisecond

func forwardResult(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// forwardRequest is the request that forwards in (with body) from this
// node, self, to the leader: the client's method, path and query on the
// leader's URL (from the candidate directory, never from the request), the
// headers of forwardedHeaders, the forwarding node (wire.HeaderForwarded)
// and the client's address (wire.HeaderForwardedFor), which the leader
// trusts from a candidate for its limits and audit lines. Every forward is
// built here: writes, the unknown-token judge and the snapshot streams.
func forwardRequest(ctx context.Context, in *http.Request, body io.Reader, leader cluster.Candidate, self string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, in.Method, strings.TrimRight(leader.URL, "/")+in.URL.RequestURI(), body) //nolint:gosec // G704: the host is the leader's
	if err != nil {
		return nil, fmt.Errorf("build forward request: %w", err)
	}
	for _, h := range forwardedHeaders {
		if v := in.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(wire.HeaderForwarded, self)
	req.Header.Set(wire.HeaderForwardedFor, in.RemoteAddr)
	return req, nil
}

// sendForward sends in (with body) to the leader and classifies a failure:
// ErrNoLeader when the leader cannot have seen the request (it was never
// written), ErrOutcomeUnknown for a write it may have applied. The transport
// may send a request more than once (it replays one that carries
// Idempotency-Key after a broken connection), so "written" is tracked over
// every attempt: a dial error on a replay after a written attempt does not
// mean "not sent".
func sendForward(ctx context.Context, client *http.Client, in *http.Request, body []byte, leader cluster.Candidate, self string) (*http.Response, error) {
	req, err := forwardRequest(ctx, in, bytes.NewReader(body), leader, self)
	if err != nil {
		return nil, err
	}
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	start := time.Now()
	resp, err := client.Do(req) //nolint:gosec // G704: the leader's URL comes from the candidate directory, not from the request
	switch {
	case err == nil:
		return resp, nil
	case !wrote.Load():
		return nil, fmt.Errorf("%w: leader %s unreachable: %v", cluster.ErrNoLeader, leader.Machine, err)
	case in.Method == http.MethodGet:
		return nil, fmt.Errorf("%w: forward to leader %s: %v", cluster.ErrNoLeader, leader.Machine, err)
	}
	return nil, fmt.Errorf("%w: forward to leader %s after %v: %v", cluster.ErrOutcomeUnknown, leader.Machine, time.Since(start).Round(time.Millisecond), err)
}
