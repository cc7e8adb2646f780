package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/config"
)

func TestMemberRunCmd_HonoursLogSettings(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 1)
	events := make(chan string, 64)
	a.mu.Lock()
	a.events = events
	a.mu.Unlock()
	t.Setenv(tokenEnv, cliTokenA)
	t.Setenv("ELANOUS_LOG_FORMAT", "json")
	t.Setenv("ELANOUS_LOG_LEVEL", "warn")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var logs string
	go func() {
		_, stderr, err := runCLI(ctx, "member", "run", "--data-dir", t.TempDir(), "--candidates", "node-a="+a.URL,
			"--machine", "mbp", "--endpoint", "http://10.0.0.9:31414", "--interval", "100ms")
		logs = stderr
		done <- err
	}()
	waitEvent(t, events, "POST /v1/resources/machine:mbp/heartbeat")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("member run: %v\n%s", err, logs)
	}
	// At warn, the Info lines (member starting, registered, stopped) are not written.
	if strings.Contains(logs, "member starting") || strings.Contains(logs, "member registered") {
		t.Errorf("log.level warn: Info lines written:\n%s", logs)
	}

	// At info, every line is JSON with the member's component.
	t.Setenv("ELANOUS_LOG_LEVEL", "info")
	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		_, stderr, err := runCLI(ctx, "member", "run", "--data-dir", t.TempDir(), "--candidates", "node-a="+a.URL,
			"--machine", "mbp", "--endpoint", "http://10.0.0.9:31414", "--interval", "100ms")
		logs = stderr
		done <- err
	}()
	waitEvent(t, events, "POST /v1/resources/machine:mbp/heartbeat")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("member run: %v\n%s", err, logs)
	}
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
