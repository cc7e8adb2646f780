package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/elanous/elanous-node/config"
)

// openAuditLog returns the audit logger of log.audit_file: JSON lines
// appended to the file (created 0600), each with the node's name. With no
// file it returns nil (the API then writes to the main log, audit=true) and
// a no-op closer.
func openAuditLog(cfg config.Config) (*slog.Logger, io.Closer, error) {
	if cfg.Log.AuditFile == "" {
		return nil, io.NopCloser(nil), nil
	}
	f, err := os.OpenFile(cfg.Log.AuditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open log.audit_file: %w", err)
	}
	return slog.New(slog.NewJSONHandler(f, nil)).With("node", cfg.Node.ID, "component", "api"), f, nil
}
