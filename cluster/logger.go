package cluster

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// raftLogger returns the hclog logger raft writes through: same output, same
// format (JSON or text) and same minimum level as the node's slog logger.
func raftLogger(cfg Config) hclog.Logger {
	level := hclog.Warn
	switch {
	case cfg.Logger.Enabled(context.Background(), slog.LevelDebug):
		level = hclog.Debug
	case cfg.Logger.Enabled(context.Background(), slog.LevelInfo):
		level = hclog.Info
	}
	out := cfg.LogOutput
	if out == nil {
		out = io.Discard
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft." + cfg.ID,
		Level:      level,
		Output:     out,
		JSONFormat: cfg.LogJSON,
	})
}
