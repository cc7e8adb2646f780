package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/elanous/elanous-node/internal/testutil"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/config"
)

// logEnvelope are the keys every line of a candidate carries, whatever wrote it.
var logEnvelope = []string{"time", "level", "msg", "node", "component"}

// pickLogLine keeps the decoded log line m in *raft when it is the first raft
// line seen, in *access when it is the first access line (the api
// component's "http request").
func pickLogLine(m map[string]any, raft, access *map[string]any) {
	switch {
	case m["component"] == "raft" && *raft == nil:
		*raft = m
	case m["component"] == "api" && m["msg"] == "http request" && *access == nil:
		*access = m
	}
}

// sharedKeys are the keys both a and b hold, sorted.
func sharedKeys(a, b map[string]any) []string {
	var shared []string
	for k := range a {
		if _, ok := b[k]; ok {
			shared = append(shared, k)
		}
	}
	slices.Sort(shared)
	return shared
}

// TestCandidate_LogSchema runs a one-candidate cluster with log.format json
// and the access log on, and checks that a line raft wrote (through hclog)
// and an access line the API wrote have the same envelope keys with values
// of the same shape.
func TestCandidate_LogSchema(t *testing.T) {
	ports := freePorts(t, 2)
	httpAddr, raftAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg := config.Default()
	cfg.Node = config.NodeConfig{ID: "node-a", DataDir: t.TempDir()}
	cfg.HTTP.Addr, cfg.HTTP.Advertise = httpAddr, "http://"+httpAddr
	cfg.Raft.Addr, cfg.Raft.Advertise = raftAddr, raftAddr
	cfg.Cluster.Candidates = []config.Candidate{{Machine: "node-a", URL: "http://" + httpAddr, Raft: raftAddr}}
	cfg.Log = config.LogConfig{Level: "info", Format: "json", Access: true}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tokens, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTokensFile(filepath.Join(cfg.Node.DataDir, "control", "tokens.json"), tokens); err != nil {
		t.Fatal(err)
	}
	var out testutil.SyncBuffer
	c, err := startCandidate(cfg, tokens, newLogger(cfg, &out))
	if err != nil {
		t.Fatalf("startCandidate() error = %v", err)
	}
	t.Cleanup(func() { _ = c.stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + httpAddr + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	var raftLine, apiLine map[string]any
	testutil.Poll(t, "a raft line and an access line", 5*time.Second, func() error {
		for _, line := range strings.Split(out.String(), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				return fmt.Errorf("log line %q is not JSON: %v", line, err)
			}
			pickLogLine(m, &raftLine, &apiLine)
		}
		if raftLine == nil || apiLine == nil {
			return fmt.Errorf("raft line %v, access line %v", raftLine != nil, apiLine != nil)
		}
		return nil
	})
	for _, line := range []map[string]any{raftLine, apiLine} {
		for _, k := range logEnvelope {
			v, ok := line[k].(string)
			if !ok || v == "" {
				t.Errorf("line %v: %q = %#v, want a non-empty string", line, k, line[k])
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"])); err != nil {
			t.Errorf("line %v: time does not parse as RFC 3339: %v", line, err)
		}
		if !slices.Contains([]string{"DEBUG", "INFO", "WARN", "ERROR"}, fmt.Sprint(line["level"])) {
			t.Errorf("line %v: level %v is not one of slog's", line, line["level"])
		}
		if line["node"] != "node-a" {
			t.Errorf("line %v: node = %v, want node-a", line, line["node"])
		}
	}
	shared := sharedKeys(raftLine, apiLine)
	want := slices.Sorted(slices.Values(logEnvelope))
	if !slices.Equal(shared, want) {
		t.Errorf("keys shared by the raft line and the access line = %v, want the envelope %v\nraft: %v\napi:  %v", shared, want, raftLine, apiLine)
	}
	for _, k := range []string{"method", "path", "route", "status", "duration_ms", "bytes", "remote"} {
		if _, ok := apiLine[k]; !ok {
			t.Errorf("access line %v lacks %q", apiLine, k)
		}
	}
}
