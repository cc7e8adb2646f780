package api

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// Error is an API error with its status and wire code. Handlers return it for
// problems they detect themselves (bad path parameter, missing header, …).
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidRequest, Message: msg}
}

func badLease(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidPortLease, Message: msg}
}

// errorMap maps sentinel errors to a status and code: the first whose
// sentinel err is (errors.Is) answers.
type errorMap []struct {
	err    error
	status int
	code   string
}

// lookup returns err as an *Error of the first entry it is, and false when
// it is none of them.
func (em errorMap) lookup(err error) (*Error, bool) {
	for _, m := range em {
		if errors.Is(err, m.err) {
			return &Error{Status: m.status, Code: m.code, Message: err.Error()}, true
		}
	}
	return nil, false
}

// errorMapping maps sentinel errors, most specific first.
var errorMapping = errorMap{
	{fsm.ErrInvalidPortLease, http.StatusBadRequest, wire.CodeInvalidPortLease},
	{fsm.ErrInvalidCommand, http.StatusBadRequest, wire.CodeInvalidRequest},
	{fsm.ErrNotFound, http.StatusNotFound, wire.CodeNotFound},
	{fsm.ErrForbidden, http.StatusForbidden, wire.CodeForbidden},
	{fsm.ErrLeaseMismatch, http.StatusConflict, wire.CodeLeaseMismatch},
	{fsm.ErrBandExhausted, http.StatusConflict, wire.CodePortBandExhausted},
	{fsm.ErrIdempotencyKeyUsed, http.StatusConflict, wire.CodeIdempotencyUsed},
	{fsm.ErrQuotaExceeded, http.StatusTooManyRequests, wire.CodeQuotaExceeded},
	{fsm.ErrTokenRevoked, http.StatusUnauthorized, wire.CodeUnauthorized},
	{cluster.ErrOutcomeUnknown, http.StatusServiceUnavailable, wire.CodeOutcomeUnknown},
	{cluster.ErrNotReady, http.StatusServiceUnavailable, wire.CodeNotReady},
	{cluster.ErrNoLeader, http.StatusServiceUnavailable, wire.CodeNoLeader},
	{cluster.ErrNotLeader, http.StatusServiceUnavailable, wire.CodeNoLeader},
	{cluster.ErrClosed, http.StatusServiceUnavailable, wire.CodeNoLeader},
}

// toWire maps any handler error to a status and error body.
func toWire(err error) (int, wire.Error) {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Status, wire.Error{Error: ae.Code, Message: ae.Message}
	}
	if ae, ok := errorMapping.lookup(err); ok {
		return ae.Status, wire.Error{Error: ae.Code, Message: ae.Message}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
		switch he.Code {
		case http.StatusNotFound:
			return he.Code, wire.Error{Error: wire.CodeNotFound, Message: "no such route"}
		case http.StatusMethodNotAllowed:
			return he.Code, wire.Error{Error: wire.CodeMethodNotAllowed, Message: "method not allowed on this route"}
		case http.StatusRequestEntityTooLarge:
			return he.Code, wire.Error{Error: wire.CodeBodyTooLarge, Message: "request body is larger than 64 KiB"}
		case http.StatusUnauthorized:
			return he.Code, wire.Error{Error: wire.CodeUnauthorized, Message: msg}
		}
		if he.Code >= 400 && he.Code < 500 {
			return he.Code, wire.Error{Error: wire.CodeInvalidRequest, Message: msg}
		}
	}
	return http.StatusInternalServerError, wire.Error{Error: wire.CodeInternal, Message: "internal error"}
}

// errorHandler is the echo HTTPErrorHandler: every error becomes
// {"error", "message"} with the mapped status.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, body := toWire(err)
	switch status {
	case http.StatusInternalServerError:
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
	case http.StatusServiceUnavailable:
		c.Response().Header().Set("Retry-After", "1")
	case http.StatusUnauthorized:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="elanous"`)
	}
	if s.log.Enabled(c.Request().Context(), slog.LevelDebug) {
		s.log.Debug("request error", "method", c.Request().Method, "path", c.Path(), "status", status, "code", body.Error)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}
