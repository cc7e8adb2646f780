package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

// forwardedHeaders are the request headers a forward carries to the leader.
var forwardedHeaders = []string{"Authorization", "Content-Type", wire.HeaderPortLeaseID, wire.HeaderIdempotencyKey, "Accept"}

// copiedHeaders are the response headers copied back from the leader.
var copiedHeaders = []string{"Content-Type", "Retry-After", "WWW-Authenticate", wire.HeaderGeneration, wire.HeaderIndex, wire.HeaderKnownLeader, wire.HeaderLastContactMs}

// budget is how long a write may take through this node: the lease endpoints
// answer within the TypeScript client's 1 s timeout.
func budget(c echo.Context) time.Duration {
	if strings.HasPrefix(c.Path(), "/v1/leases/port/:port") {
		return 800 * time.Millisecond
	}
	return 5 * time.Second
}

// leaderWait bounds how long a write waits for a leader to appear (or to
// become ready) before it answers 503 no-leader: DESIGN §5 wants that answer
// within 1 s, whatever the endpoint's budget.
const leaderWait = 750 * time.Millisecond

// propose proposes cmd. When this node is not the leader it forwards the
// request to the leader and returns handled=true: the response is written.
// With no leader (or a leader not ready) it waits for one, at most leaderWait.
func (s *Server) propose(c echo.Context, cmd fsm.Command) (res any, handled bool, err error) {
	b := budget(c)
	ctx, cancel := context.WithTimeout(c.Request().Context(), b)
	defer cancel()
	waitUntil := time.Now().Add(min(b*3/4, leaderWait))
	for {
		var applied cluster.Applied
		applied, err = s.node.Propose(ctx, cmd)
		res = applied.Value
		switch {
		case errors.Is(err, cluster.ErrNotLeader):
			if c.Request().Header.Get(wire.HeaderForwarded) != "" {
				return nil, false, fmt.Errorf("%w: forwarded request reached a follower", cluster.ErrNoLeader)
			}
			return nil, true, s.forward(c, ctx)
		case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrNotReady):
			if time.Now().After(waitUntil) || !s.waitForLeader(ctx, waitUntil) {
				return nil, false, err
			}
			continue
		}
		return res, false, err
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

// forward sends the request, with its body and credentials, to the leader and
// copies the answer back. A connection refused means nothing was sent: 503
// no-leader. A failure after sending is 503 outcome-unknown for a write.
func (s *Server) forward(c echo.Context, ctx context.Context) error {
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
	for _, h := range copiedHeaders {
		if v := resp.Header.Get(h); v != "" {
			c.Response().Header().Set(h, v)
		}
	}
	c.Response().WriteHeader(resp.StatusCode)
	_, err = io.Copy(c.Response(), io.LimitReader(resp.Body, 64<<20))
	return err
}

func forwardResult(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// sendForward sends in (with body) to the leader and classifies a failure:
// ErrNoLeader when the leader cannot have seen the request (it was never
// written), ErrOutcomeUnknown for a write it may have applied. The transport
// may send a request more than once (it replays one that carries
// Idempotency-Key after a broken connection), so "written" is tracked over
// every attempt: a dial error on a replay after a written attempt does not
// mean "not sent".
func sendForward(ctx context.Context, client *http.Client, in *http.Request, body []byte, leader cluster.Candidate, self string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, in.Method, strings.TrimRight(leader.URL, "/")+in.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build forward request: %w", err)
	}
	for _, h := range forwardedHeaders {
		if v := in.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(wire.HeaderForwarded, self)
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	start := time.Now()
	resp, err := client.Do(req)
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
