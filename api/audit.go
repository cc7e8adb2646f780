package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// Auditor writes the audit log: one line per admin action (token issue and
// revoke, an admin's lease release, a limits change, and the snapshot, peer
// and leader-transfer routes) and per authentication failure. Each line has
// the time, audit=true, the action, its outcome ("ok" or the error code) and
// HTTP status, the caller's token fingerprint (the first 16 hex of its
// SHA-256; never the token), the client's address, the method and route, and
// the action's own attributes. It goes to log.audit_file, or to the main log.
//
// A route gets its line by naming its action in the route table (withAudit):
// the line is written where the handler runs, once the handler returns. A
// handler that audits something the table cannot see calls Record itself.
// Safe for concurrent use.
type Auditor struct {
	log *slog.Logger
	// address returns the client's address of a request (the client a
	// follower forwarded it for, when it is a forward).
	address func(*http.Request) string
}

// Record writes the audit line of the request c for action (dotted, such as
// "token.issue"); err is the outcome, nil for success. attrs are added to
// the line, after the attributes the handler gave with auditDetail.
func (a *Auditor) Record(c echo.Context, action string, err error, attrs ...slog.Attr) {
	r := c.Request()
	outcome, status := "ok", c.Response().Status
	if err != nil {
		var body wire.Error
		status, body = toWire(err)
		outcome = body.Error
	}
	line := []slog.Attr{
		slog.Bool("audit", true), slog.String("action", action), slog.String("outcome", outcome), slog.Int("status", status),
		slog.String("token", callerFingerprint(c)), slog.String("remote", a.address(r)),
		slog.String("method", r.Method), slog.String("route", c.Path()),
	}
	if id := identity(c); id.Machine != "" {
		line = append(line, slog.String("machine_token", id.Machine))
	}
	if by := r.Header.Get(wire.HeaderForwarded); by != "" && wire.ValidCandidate(by) {
		line = append(line, slog.String("via", by))
	}
	if d, ok := c.Get(auditKey).([]slog.Attr); ok {
		line = append(line, d...)
	}
	line = append(line, attrs...)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	a.log.LogAttrs(context.Background(), level, "audit", line...)
}

const auditKey = "elanous.audit"

// auditDetail adds attributes to the audit line of the request, if it gets
// one (the handler knows what the action was about: a machine, a port).
func auditDetail(c echo.Context, attrs ...slog.Attr) {
	d, _ := c.Get(auditKey).([]slog.Attr)
	c.Set(auditKey, append(d, attrs...))
}

// callerFingerprint is the fingerprint of the request's token: the
// authenticated caller's, or that of a well-formed token that failed, so
// repeated failures of one token can be told apart. A malformed credential
// has none: nothing of it is logged.
func callerFingerprint(c echo.Context) string {
	if id := identity(c); id.Owner != "" {
		return id.Owner
	}
	scheme, token, ok := strings.Cut(c.Request().Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !wire.ValidToken(token) {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// withAudit marks rt as an admin action named action: its outcome is
// written to the audit log where its handler runs. A route below the admin
// scope (an admin's lease release) is audited only for admin callers.
func withAudit(action string, rt route) route {
	rt.audit = action
	return rt
}

// audited is the middleware of a route with an audit action; it runs last,
// so only the node that runs the handler (the leader, for a write) writes
// the line.
func (s *Server) audited(action string, minScope Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			if errors.Is(err, errForwarded) || (minScope < ScopeAdmin && identity(c).Scope < ScopeAdmin) {
				return err
			}
			s.audit.Record(c, action, err)
			return err
		}
	}
}
