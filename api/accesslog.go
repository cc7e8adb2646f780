package api

import "log/slog"

// LogRequests turns the access log on: one Info line per request, written
// to l once the request is answered, with method, path (no query string),
// route, status, duration_ms, bytes (of the response body) and remote (the
// peer's address). Headers are never logged, so neither is a token. Call it
// before Serve or Handler; a nil l turns the log off.
func (s *Server) LogRequests(l *slog.Logger) {
	s.metrics.access = l
}
