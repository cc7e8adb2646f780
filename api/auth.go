package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// Scope is what a token may do; each scope includes the ones below it.
type Scope int

// Scopes, weakest first.
const (
	ScopeNone Scope = iota
	ScopeQuery
	ScopeMember
	ScopeAdmin
)

// Identity is the authenticated caller.
type Identity struct {
	Scope Scope
	// Machine is set for machine tokens: such a caller may touch only the
	// resources and leases of its machine.
	Machine string
	// Owner is the token's fingerprint: the first 16 hex of its SHA-256.
	Owner string
	// TokenSHA256 is, for a machine token, its SHA-256 in hex: a command
	// carries it so that Apply refuses it if the token was revoked or
	// re-issued before the command was applied.
	TokenSHA256 string
}

// Caller returns the fsm caller of an identity.
func (id Identity) Caller() fsm.Caller {
	return fsm.Caller{Owner: id.Owner, Machine: id.Machine, Admin: id.Scope == ScopeAdmin, TokenSHA256: id.TokenSHA256}
}

type clusterToken struct {
	scope Scope
	sum   [32]byte
}

func hashTokens(t wire.TokensFile) []clusterToken {
	var out []clusterToken
	for _, e := range []struct {
		tok   string
		scope Scope
	}{{t.Admin, ScopeAdmin}, {t.Member, ScopeMember}, {t.Query, ScopeQuery}} {
		if e.tok != "" {
			out = append(out, clusterToken{scope: e.scope, sum: sha256.Sum256([]byte(e.tok))})
		}
	}
	return out
}

// errUnknownToken is returned by authenticate for a well-formed token that
// is neither a cluster token nor a machine token applied on this node.
var errUnknownToken = unauthorized("unknown token")

func unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthorized, Message: msg}
}

func forbidden(msg string) *Error {
	return &Error{Status: http.StatusForbidden, Code: wire.CodeForbidden, Message: msg}
}

// authenticate resolves the bearer token of the request. Cluster tokens are
// compared by hash in constant time; machine tokens are looked up by hash in
// the replicated state. It never logs the token.
func (s *Server) authenticate(r *http.Request) (Identity, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return Identity{}, unauthorized("missing bearer token")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !wire.ValidToken(token) {
		return Identity{}, unauthorized("malformed bearer token: want 64 lowercase hex characters")
	}
	sum := sha256.Sum256([]byte(token))
	owner := hex.EncodeToString(sum[:8])
	scope := ScopeNone
	for _, ct := range *s.clusterTokens.Load() {
		if subtle.ConstantTimeCompare(ct.sum[:], sum[:]) == 1 {
			scope = ct.scope
		}
	}
	if scope != ScopeNone {
		return Identity{Scope: scope, Owner: owner}, nil
	}
	if machine, ok := s.node.FSM().MachineForToken(sum); ok {
		return Identity{Scope: ScopeMember, Machine: machine, Owner: owner, TokenSHA256: hex.EncodeToString(sum[:])}, nil
	}
	return Identity{}, errUnknownToken
}

// require is middleware admitting callers with at least scope.
func (s *Server) require(scope Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id, err := s.authenticate(c.Request())
			if errors.Is(err, errUnknownToken) {
				switch {
				case s.confirmUnknownToken(c):
					id, err = s.authenticate(c.Request())
				case s.forwardUnknownToken(c):
					return nil
				}
			}
			if err != nil {
				return s.authFailed(c, err)
			}
			if id.Scope < scope {
				c.Set(identityKey, id)
				return s.authFailed(c, forbidden("token lacks the "+scopeName(scope)+" scope"))
			}
			c.Set(identityKey, id)
			return next(c)
		}
	}
}

// authFailed answers a request whose credentials failed (err is the 401 or
// 403): the failure takes a token from the address's write bucket, and once
// that is empty the answer is 429 rate-limited instead, unlogged; otherwise
// the failure is written to the audit log and err returned.
func (s *Server) authFailed(c echo.Context, err error) error {
	if limited := s.chargeAuthFailure(c); limited != nil {
		return limited
	}
	s.audit.Record(c, "auth", err)
	return err
}

// confirmUnknownToken brings a follower up to date before it judges a token
// it does not know: a machine token issued an instant ago (201 from the
// leader) may be in an entry this node has not received yet. The follower
// joins a confirmation round (cluster.Node.ConfirmedRead: the leader's commit
// index, applied here), shared by every request waiting on it, so a flood of
// random tokens costs the leader one confirmation per round, not one per
// token. It reports whether the round succeeded; the token is then judged on
// state as current as the leader's when the request arrived.
func (s *Server) confirmUnknownToken(c echo.Context) bool {
	if c.Request().Header.Get(wire.HeaderForwarded) != "" || s.node.IsLeader() {
		return false
	}
	deadline, _ := budgetOf(c)
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	_, err := s.node.ConfirmedRead(ctx)
	return err == nil
}

// forwardUnknownToken lets the leader judge a token this follower does not
// know when no confirmation round could be had, while the follower lags: the
// token may be in an entry this node has received and not yet applied. A
// follower that has applied every entry it holds answers 401 at once, and
// forwards are paced (unknownTokenForwardRate), so a flood of random tokens
// never reaches the leader. The forward is the write
// path's: within the route's budget, and a write is answered only once this
// node has applied it. It reports whether the leader's answer was written;
// when the leader cannot be reached the caller answers 401 itself.
func (s *Server) forwardUnknownToken(c echo.Context) bool {
	if c.Request().Header.Get(wire.HeaderForwarded) != "" || s.node.IsLeader() {
		return false
	}
	if !s.nodeLags() || !s.guard.unknownForwards.Allow() {
		return false
	}
	if _, ok := s.node.Leader(); !ok {
		return false
	}
	deadline, _ := budgetOf(c)
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	err := s.forward(ctx, c)
	if err != nil && !c.Response().Committed {
		return false
	}
	return true
}

// nodeLags reports whether this node holds entries it has not applied
// (cluster.Node.Lagging, or Deps.Lagging when set).
func (s *Server) nodeLags() bool {
	if s.lagging != nil {
		return s.lagging()
	}
	return s.node.Lagging()
}

const identityKey = "elanous.identity"

func identity(c echo.Context) Identity {
	id, _ := c.Get(identityKey).(Identity)
	return id
}

// coversMachine reports whether id may read and write the records of
// machine: a cluster token covers every machine, a machine token only its own.
func (id Identity) coversMachine(machine string) bool {
	return id.Machine == "" || id.Machine == machine
}

func scopeName(s Scope) string {
	switch s {
	case ScopeQuery:
		return "query"
	case ScopeMember:
		return "member"
	case ScopeAdmin:
		return "admin"
	}
	return "none"
}
