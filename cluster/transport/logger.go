package transport

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is the slog level of raft's Trace lines, below slog.LevelDebug.
const LevelTrace = slog.LevelDebug - 4

// RaftLogger returns the hclog.Logger that raft, its TCP transport and its
// snapshot store write through for the node named node. It is an adapter
// onto the node's slog handler, so raft's lines have the process's format
// (text or JSON), minimum level and keys: time, level, msg, node, component
// ("raft"), then raft's own attributes in snake_case, "err" for an error
// (see normalizeKey).
func RaftLogger(logger *slog.Logger, node string) hclog.Logger {
	return &slogHCLogger{
		log:   logger.With("node", node, "component", "raft"),
		name:  "raft",
		level: new(atomic.Int32),
	}
}

// slogHCLogger implements hclog.Logger on a slog.Logger. It is safe for
// concurrent use; every copy made by With or Named shares level.
type slogHCLogger struct {
	log     *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // an hclog.Level set by SetLevel; NoLevel defers to the handler
}

var _ hclog.Logger = (*slogHCLogger)(nil)

// slogLevel maps an hclog level to the slog level it is logged at.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *slogHCLogger) enabled(l hclog.Level) bool {
	if l == hclog.Off {
		return false
	}
	if floor := hclog.Level(h.level.Load()); floor != hclog.NoLevel && l < floor {
		return false
	}
	return h.log.Enabled(context.Background(), slogLevel(l))
}

// Log writes one line at level with args as key/value pairs.
func (h *slogHCLogger) Log(level hclog.Level, msg string, args ...any) {
	if !h.enabled(level) {
		return
	}
	h.log.Log(context.Background(), slogLevel(level), msg, convertArgs(args)...)
}

// convertArgs turns hclog's key/value pairs into slog's: keys are
// normalized (normalizeKey), hclog.Format values are formatted, and a fmt.Stringer (raft passes
// *Raft and server structs) is logged as its String(), as hclog does, rather
// than as a JSON object.
func convertArgs(args []any) []any {
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) { // a value without a key, as hclog allows
			out = append(out, "extra", convertValue(args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		key = normalizeKey(key)
		out = append(out, key, convertValue(args[i+1]))
	}
	return out
}

// reservedKeys are the keys of the process's log envelope (and slog's
// source); a raft attribute of the same name gets a "raft_" prefix so that
// it cannot shadow them (raft logs "failed to contact" with a "time").
var reservedKeys = map[string]bool{"time": true, "level": true, "msg": true, "node": true, "component": true, "source": true}

// normalizeKey gives raft's keys the process's style: snake_case
// ("leader-address" is leader_address, "backoff time" is backoff_time),
// "error" is "err", and a reserved key gets a "raft_" prefix.
func normalizeKey(key string) string {
	if key == "error" {
		return "err"
	}
	key = strings.NewReplacer("-", "_", " ", "_").Replace(key)
	if reservedKeys[key] {
		return "raft_" + key
	}
	return key
}

func convertValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case hclog.Format:
		if len(x) == 0 {
			return ""
		}
		if f, ok := x[0].(string); ok {
			return fmt.Sprintf(f, x[1:]...)
		}
		return fmt.Sprint(x...)
	case error:
		if isNilPointer(x) {
			return nil
		}
		return x.Error()
	case fmt.Stringer:
		if isNilPointer(x) {
			return nil
		}
		return x.String()
	}
	return v
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Trace logs at LevelTrace.
func (h *slogHCLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }

// Debug logs at slog.LevelDebug.
func (h *slogHCLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }

// Info logs at slog.LevelInfo.
func (h *slogHCLogger) Info(msg string, args ...any) { h.Log(hclog.Info, msg, args...) }

// Warn logs at slog.LevelWarn.
func (h *slogHCLogger) Warn(msg string, args ...any) { h.Log(hclog.Warn, msg, args...) }

// Error logs at slog.LevelError.
func (h *slogHCLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

// IsTrace reports whether Trace lines are written.
func (h *slogHCLogger) IsTrace() bool { return h.enabled(hclog.Trace) }

// IsDebug reports whether Debug lines are written.
func (h *slogHCLogger) IsDebug() bool { return h.enabled(hclog.Debug) }

// IsInfo reports whether Info lines are written.
func (h *slogHCLogger) IsInfo() bool { return h.enabled(hclog.Info) }

// IsWarn reports whether Warn lines are written.
func (h *slogHCLogger) IsWarn() bool { return h.enabled(hclog.Warn) }

// IsError reports whether Error lines are written.
func (h *slogHCLogger) IsError() bool { return h.enabled(hclog.Error) }

// ImpliedArgs returns the key/value pairs With added.
func (h *slogHCLogger) ImpliedArgs() []any { return append([]any(nil), h.implied...) }

// With returns a logger that adds args to every line.
func (h *slogHCLogger) With(args ...any) hclog.Logger {
	c := *h
	c.log = h.log.With(convertArgs(args)...)
	c.implied = append(append([]any(nil), h.implied...), args...)
	return &c
}

// Name returns the logger's name; it is not written to the lines, whose
// component is always "raft".
func (h *slogHCLogger) Name() string { return h.name }

// Named returns a logger named name under this one.
func (h *slogHCLogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

// ResetNamed returns a logger named name.
func (h *slogHCLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel sets a minimum level on top of the slog handler's.
func (h *slogHCLogger) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }

// GetLevel returns the lowest level that is written.
func (h *slogHCLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

// StandardLogger returns a *log.Logger whose lines go to the slog handler
// at Info, or at opts.ForceLevel when set.
func (h *slogHCLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	level := slog.LevelInfo
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = slogLevel(opts.ForceLevel)
	}
	return slog.NewLogLogger(h.log.Handler(), level)
}

// StandardWriter returns the writer of StandardLogger.
func (h *slogHCLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(opts).Writer()
}
