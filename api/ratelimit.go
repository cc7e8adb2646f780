package api

// The write rate limits: per machine token after authentication, per
// address for failed credentials (ARCHITECTURE.md §7).

import (
	"time"

	"github.com/labstack/echo/v4"
)

// Rate of the forwards of unknown tokens from a lagging follower to the
// leader: a machine token issued a moment ago is rare, a flood of random
// ones must not reach the leader.
const (
	unknownTokenForwardRate  = 10
	unknownTokenForwardBurst = 20
)

// admitWrite is the rate limit of writes, after authentication and before
// the write middleware: a write with a machine token takes one token from
// that machine token's bucket. A write a follower forwards was charged there
// and is not charged again on the leader (the node a client talks to limits
// it, once). Authenticated writes are not limited by address: a fleet behind
// one NAT address shares it, and cluster tokens (admin, member, query) are
// shared by whole fleets; their harm is bounded by the replicated quotas.
// Only requests nobody is known for, failed or missing credentials, are
// limited per address (chargeAuthFailure).
func (s *Server) admitWrite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		g := s.guard
		if g.addresses == nil || g.peerForward(c.Request()) {
			return next(c)
		}
		if id := identity(c); id.Machine != "" {
			if ok, retry := g.tokens.allow(id.Owner, time.Now()); !ok {
				g.limited.WithLabelValues("token").Inc()
				return refuse(c, retry, "too many writes with this token; retry after the time in Retry-After")
			}
		}
		return next(c)
	}
}

// chargeAuthFailure takes a token from the bucket of the address of a
// request that failed authentication, so a flood of bad tokens is refused
// 429 (and neither logged in the audit log nor judged) once the bucket is
// empty. It returns the 429, or nil when the failure may be answered.
func (s *Server) chargeAuthFailure(c echo.Context) error {
	g := s.guard
	if g.addresses == nil || g.peerForward(c.Request()) {
		return nil
	}
	if ok, retry := g.addresses.allow(addressKey(c.Request().RemoteAddr), time.Now()); !ok {
		g.limited.WithLabelValues("address").Inc()
		return refuse(c, retry, "too many requests with bad credentials from this address")
	}
	return nil
}
