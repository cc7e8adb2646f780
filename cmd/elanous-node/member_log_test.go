package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/config"
)

func TestMemberRunCmd_HonoursLogSettings(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 1)
	events := a.watch()
	t.Setenv(tokenEnv, cliTokenA)
	t.Setenv("ELANOUS_LOG_FORMAT", "json")
	t.Setenv("ELANOUS_LOG_LEVEL", "warn")
	logs := runMemberUntilHeartbeat(t, a, events)
	// At warn, the Info lines (member starting, registered, stopped) are not written.
	if strings.Contains(logs, "member starting") || strings.Contains(logs, "member registered") {
		t.Errorf("log.level warn: Info lines written:\n%s", logs)
	}

	// At info, every line is JSON with the member's component.
	t.Setenv("ELANOUS_LOG_LEVEL", "info")
	logs = runMemberUntilHeartbeat(t, a, events)
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) < 2 {
		t.Fatalf("log.level info: %d lines, want the member's Info lines:\n%s", len(lines), logs)
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("log.format json: line %q is not JSON: %v", line, err)
			continue
		}
		if m["component"] != "member" || m["time"] == nil || m["level"] == nil || m["msg"] == nil {
			t.Errorf("line %q: want time, level, msg and component member", line)
		}
	}
}

func TestCheckLogConfig(t *testing.T) {
	tests := []struct {
		level, format string
		ok            bool
	}{
		{"info", "text", true},
		{"debug", "json", true},
		{"verbose", "text", false},
		{"info", "xml", false},
	}
	for _, tt := range tests {
		err := checkLogConfig(config.LogConfig{Level: tt.level, Format: tt.format})
		if (err == nil) != tt.ok {
			t.Errorf("checkLogConfig(%q, %q) = %v, want ok %v", tt.level, tt.format, err, tt.ok)
		}
	}
	t.Setenv(tokenEnv, cliTokenA)
	t.Setenv("ELANOUS_LOG_LEVEL", "verbose")
	if _, _, err := runCLI(t.Context(), "member", "run", "--candidates", "http://127.0.0.1:1", "--machine", "mbp", "--endpoint", "http://10.0.0.9:31414"); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("member run with log.level verbose error = %v, want it refused", err)
	}
}
