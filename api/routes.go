package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/elanous/elanous-node/api/console"
	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

// Time budgets of the routes: how long a request may take through this node,
// forwarding, waiting for a leader and the read-your-writes wait included.
const (
	// defaultBudget bounds every route but the two below.
	defaultBudget = 5 * time.Second
	// leaseBudget bounds lease heartbeat and release: the TypeScript client
	// gives each a 1 s timeout, and they must answer within it through any
	// candidate.
	leaseBudget = 800 * time.Millisecond
)

// Leader waits: how long a request waits for a leader to appear (or to become
// ready) before it answers 503 no-leader.
const (
	// writeLeaderWait caps a write's wait: with no leader a write answers
	// 503 no-leader within 1 s, whatever its budget.
	writeLeaderWait = 750 * time.Millisecond
	// readLeaderWait caps a consistent read's wait.
	readLeaderWait = 3 * time.Second
)

// route is one entry of the route table: everything the server knows about a
// method and path.
type route struct {
	method, path string
	handler      echo.HandlerFunc
	// scope is the least scope a caller needs; ScopeNone takes no token.
	scope Scope
	// write marks a route that proposes a command. Its requests pass the
	// write middleware: a node that does not lead forwards them to the leader
	// before the handler runs, and answers only once it has applied the
	// write (read-your-writes).
	write bool
	// table is the table a write changes; the forwarding node wakes on its
	// changes while it waits to apply the write.
	table fsm.Table
	// budget bounds the request through this node.
	budget time.Duration
	// audit names the admin action the route performs; its outcome is
	// written to the audit log (withAudit).
	audit string
	// renewal marks a write that renews a record (a heartbeat, a lease
	// renewal): its handler runs on every node, which answers it from
	// confirmed state when it can and forwards it otherwise
	// (ARCHITECTURE.md, "Renewals"), instead of the write middleware
	// forwarding every request of the route.
	renewal bool
}

// leaderWait is how long a request of the route waits for a leader.
func (rt *route) leaderWait() time.Duration {
	if rt.write {
		return min(rt.budget*3/4, writeLeaderWait)
	}
	return min(rt.budget, readLeaderWait)
}

// routeTable returns every route of the API (the table of docs/http-api.md).
// metricsAuth makes /metrics take the query scope.
func (s *Server) routeTable(metricsAuth bool) []route {
	metricsScope := ScopeNone
	if metricsAuth {
		metricsScope = ScopeQuery
	}
	read := func(method, path string, h echo.HandlerFunc, scope Scope) route {
		return route{method: method, path: path, handler: h, scope: scope, budget: defaultBudget}
	}
	write := func(method, path string, h echo.HandlerFunc, scope Scope, table fsm.Table, budget time.Duration) route {
		return route{method: method, path: path, handler: h, scope: scope, write: true, table: table, budget: budget}
	}
	const get, post, put, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	return append([]route{
		read(get, "/v1/primary", s.getPrimary, ScopeNone),
		read(get, "/v1/health", s.getHealth, ScopeNone),
		read(get, "/v1/ready", s.getReady, ScopeNone),
		read(get, "/metrics", s.getMetrics, metricsScope),

		write(post, "/v1/resources/register", answer(http.StatusOK, s.registerResource), ScopeMember, fsm.TableResources, defaultBudget),
		renewal(write(post, "/v1/resources/:id/heartbeat", answer(http.StatusOK, s.heartbeatResource), ScopeMember, fsm.TableResources, defaultBudget)),
		write(del, "/v1/resources/:id", noContent(s.deleteResource), ScopeMember, fsm.TableResources, defaultBudget),
		read(get, "/v1/resources", answer(http.StatusOK, s.listResources), ScopeQuery),
		read(get, "/v1/resources/:id", answer(http.StatusOK, s.getResource), ScopeQuery),

		write(post, "/v1/leases/port", answer(http.StatusCreated, s.acquireLease), ScopeMember, fsm.TableLeases, defaultBudget),
		renewal(write(post, "/v1/leases/port/:port/heartbeat", answer(http.StatusOK, s.renewLease), ScopeMember, fsm.TableLeases, leaseBudget)),
		withAudit("lease.release", write(del, "/v1/leases/port/:port", noContent(s.releaseLease), ScopeMember, fsm.TableLeases, leaseBudget)),
		read(get, "/v1/leases/port", answer(http.StatusOK, s.listLeases), ScopeQuery),
		read(get, "/v1/leases/port/:port", answer(http.StatusOK, s.getLease), ScopeQuery),
		// A read, though a POST: it proposes nothing (checkFence).
		read(post, "/v1/fences/check", s.checkFence, ScopeQuery),

		withAudit("token.issue", write(post, "/v1/tokens/member", answer(http.StatusCreated, s.issueToken), ScopeAdmin, fsm.TableTokens, defaultBudget)),
		withAudit("token.revoke", write(del, "/v1/tokens/member/:machine", noContent(s.revokeToken), ScopeAdmin, fsm.TableTokens, defaultBudget)),
		read(get, "/v1/tokens/member", answer(http.StatusOK, s.listTokens), ScopeAdmin),

		read(get, "/v1/events", s.streamEvents, ScopeQuery),
		read(get, "/v1/cluster/timeline", answer(http.StatusOK, s.timeline), ScopeQuery),
		read(get, "/v1/cluster/status", s.clusterStatus, ScopeQuery),
		read(get, "/v1/cluster/overview", s.clusterOverview, ScopeQuery),
		read(post, "/v1/cluster/confirm", answer(http.StatusOK, s.confirm), ScopeQuery),
		read(get, "/v1/cluster/limits", answer(http.StatusOK, s.getLimits), ScopeQuery),
		// Limits change no table: the forwarding node's apply wait polls.
		withAudit("limits.set", write(put, "/v1/cluster/limits", answer(http.StatusOK, s.putLimits), ScopeAdmin, fsm.TablePrimary, defaultBudget)),

		read(get, "/v1/cluster/peers", answer(http.StatusOK, s.listPeers), ScopeQuery),
		withAudit("peers.add", write(post, "/v1/cluster/peers", s.addPeer, ScopeAdmin, fsm.TableCandidates, defaultBudget)),
		withAudit("peers.remove", write(del, "/v1/cluster/peers/:machine", noContent(s.removePeer), ScopeAdmin, fsm.TableCandidates, defaultBudget)),
		withAudit("peers.promote", write(post, "/v1/cluster/peers/:machine/promote", answer(http.StatusOK, s.promotePeer), ScopeAdmin, fsm.TableCandidates, defaultBudget)),
		withAudit("peers.demote", write(post, "/v1/cluster/peers/:machine/demote", answer(http.StatusOK, s.demotePeer), ScopeAdmin, fsm.TableCandidates, defaultBudget)),
	}, s.opsRoutes()...)
}

// routes registers the route table. Each route's middleware runs in this
// order: the route's bookkeeping, authentication (unless the route is
// public), for a write its rate limit and the write middleware, and for an
// admin action its audit line.
func (s *Server) routes(metricsAuth bool) {
	for _, rt := range s.routeTable(metricsAuth) {
		s.metrics.routes[rt.path] = true
		mw := []echo.MiddlewareFunc{withRoute(&rt)}
		if rt.scope != ScopeNone {
			mw = append(mw, s.require(rt.scope))
		}
		switch {
		case rt.renewal:
			mw = append(mw, s.admitWrite, withBody)
		case rt.write:
			mw = append(mw, s.admitWrite, s.leaderOnly)
		}
		if rt.audit != "" {
			mw = append(mw, s.audited(rt.audit, rt.scope))
		}
		s.echo.Add(rt.method, rt.path, rt.handler, mw...)
	}
	// The web console takes no token: its pages carry no data, and read the
	// API with the token the user gives them (api/console).
	ui := echo.WrapHandler(console.New())
	for _, p := range []string{"/ui", console.Prefix + "*"} {
		s.metrics.routes[p] = true
		s.echo.Any(p, ui)
	}
}

// renewal marks rt as a renewal route.
func renewal(rt route) route {
	rt.renewal = true
	return rt
}

// answer adapts a typed handler: its value is the JSON body with status.
func answer[T any](status int, h func(echo.Context) (T, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		v, err := h(c)
		if err != nil {
			return err
		}
		return c.JSON(status, v)
	}
}

// noContent adapts a handler whose success is 204 with no body.
func noContent(h func(echo.Context) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := h(c); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

const routeKey = "elanous.route"

// requestRoute is a request's route and its budget clock.
type requestRoute struct {
	*route
	// started is when the budget clock started: the first call of
	// budgetOf, which is the write middleware for a write, the
	// authentication's unknown-token forward, or the consistent-read barrier
	// (after any blocking wait) for a read.
	started time.Time
}

// withRoute records rt for the request, and turns errForwarded (the answer
// is written: the request was forwarded) into success.
func withRoute(rt *route) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set(routeKey, &requestRoute{route: rt})
			if err := next(c); !errors.Is(err, errForwarded) {
				return err
			}
			return nil
		}
	}
}

// budgetOf returns the request's deadline (its route's budget) and how long
// it may wait for a leader, both counted from the first call.
func budgetOf(c echo.Context) (deadline, leaderUntil time.Time) {
	rr, ok := c.Get(routeKey).(*requestRoute)
	if !ok { // not registered through the table: the default budget
		rr = &requestRoute{route: &route{budget: defaultBudget}}
		c.Set(routeKey, rr)
	}
	if rr.started.IsZero() {
		rr.started = time.Now()
	}
	return rr.started.Add(rr.budget), rr.started.Add(rr.leaderWait())
}

// routeOf returns the request's route (nil for a request outside the table).
func routeOf(c echo.Context) *route {
	if rr, ok := c.Get(routeKey).(*requestRoute); ok {
		return rr.route
	}
	return nil
}
