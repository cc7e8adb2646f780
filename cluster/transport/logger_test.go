package transport

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/go-hclog"
)

type stringer struct{}

func (stringer) String() string { return "as-string" }

func TestRaftLogger_WritesThroughSlog(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := RaftLogger(logger, "node-a")

	h.Trace("not written")
	h.Debug("not written either")
	h.With("snapshot", "s1").Info("entering follower state",
		"error", errors.New("boom"), "servers", hclog.Fmt("%d servers", 3), "follower", stringer{}, "term", 7,
		"time", "150ms", "leader-address", "10.0.0.1:31412", "backoff time", "10ms")
	h.Warn("odd", "dangling")

	lines := buf.JSONLines(t)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (Trace and Debug are below the handler's level):\n%s", len(lines), buf.String())
	}
	want := map[string]any{
		"level": "INFO", "msg": "entering follower state", "node": "node-a", "component": "raft",
		"snapshot": "s1", "err": "boom", "servers": "3 servers", "follower": "as-string", "term": float64(7),
		"raft_time": "150ms", "leader_address": "10.0.0.1:31412", "backoff_time": "10ms",
	}
	for k, v := range want {
		if got := lines[0][k]; got != v {
			t.Errorf("line[%q] = %#v, want %#v", k, got, v)
		}
	}
	if _, ok := lines[0]["error"]; ok {
		t.Error(`raft's "error" key was kept, want it renamed "err"`)
	}
	if ts, _ := lines[0]["time"].(string); !strings.HasPrefix(ts, "20") {
		t.Errorf("line time = %q, want the record's timestamp (raft's own \"time\" moved to raft_time)", ts)
	}
	if got := lines[1]["extra"]; got != "dangling" {
		t.Errorf(`a value without a key is logged under "extra" = %#v, want "dangling"`, got)
	}
}

func TestRaftLogger_Levels(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: LevelTrace}))
	h := RaftLogger(logger, "node-a")
	if !h.IsTrace() || h.GetLevel() != hclog.Trace {
		t.Errorf("IsTrace() = %v, GetLevel() = %v with a trace handler, want true, Trace", h.IsTrace(), h.GetLevel())
	}
	h.SetLevel(hclog.Warn)
	named := h.Named("sub")
	if named.IsInfo() || !named.IsWarn() {
		t.Errorf("after SetLevel(Warn): IsInfo() = %v, IsWarn() = %v, want false, true (shared by Named)", named.IsInfo(), named.IsWarn())
	}
	named.Info("dropped")
	named.Error("kept")
	lines := buf.JSONLines(t)
	if len(lines) != 1 || lines[0]["msg"] != "kept" || lines[0]["level"] != "ERROR" {
		t.Errorf("lines = %v, want one ERROR line", lines)
	}
	std := h.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error})
	std.Print("from the standard logger")
	if !strings.Contains(buf.String(), "from the standard logger") {
		t.Error("StandardLogger's line did not reach the handler")
	}
}
