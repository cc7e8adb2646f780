package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/wire"
)

// runLimitsCLI runs limits and status under a root like the real one.
func runLimitsCLI(ctx context.Context, args ...string) (string, string, error) {
	return runUnder(ctx, []*cobra.Command{newLimitsCmd(), newStatusCmd()}, args...)
}

// limits get and set against a real cluster: set changes only the quotas
// named, keeps the others, and status shows the quotas in force.
func TestLimitsCmd(t *testing.T) {
	c := apitest.Start(t, apitest.Options{Timeout: 500 * time.Millisecond}) // the production timeouts: steady under -race on a loaded machine
	for _, n := range c.Nodes {
		c.WaitFor(n.Machine+" at format 2", 10*time.Second, func() bool { return n.Node.FSM().Format() >= 2 })
	}
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.Machine+"="+n.URL)
	}
	run := func(token string, args ...string) (string, error) {
		t.Helper()
		t.Setenv(tokenEnv, token)
		out, stderr, err := runLimitsCLI(t.Context(), append(args, "--candidates", strings.Join(urls, ","), "--data-dir", t.TempDir())...)
		if err != nil {
			return out + stderr, err
		}
		return out, nil
	}
	out, err := run(c.Tokens.Query, "limits", "get")
	if err != nil {
		t.Fatalf("limits get: %v\n%s", err, out)
	}
	for _, want := range []string{"resources per machine  default  1024", "leases per machine     default  12", "resources              default  250000",
		"idempotency keys       default  100000", "this candidate (limits.*)"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits get printed:\n%s\nwant a line with %q", out, want)
		}
	}
	if out, err = run(c.Tokens.Admin, "limits", "set", "--resources-per-machine", "5"); err != nil || !strings.Contains(out, "resources per machine  5        5") {
		t.Fatalf("limits set --resources-per-machine 5 = %v:\n%s", err, out)
	}
	if out, err = run(c.Tokens.Admin, "limits", "set", "--leases-per-machine", "3", "--json"); err != nil {
		t.Fatalf("limits set --leases-per-machine 3: %v\n%s", err, out)
	}
	var st wire.LimitsStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("limits set --json printed %q: %v", out, err)
	}
	if want := (wire.Limits{ResourcesPerMachine: 5, LeasesPerMachine: 3}); st.Set != want {
		t.Errorf("limits after two sets = %+v, want %+v (each set keeps the other quotas)", st.Set, want)
	}
	out, err = run(c.Tokens.Query, "status")
	if err != nil || !strings.Contains(out, "limits: 5 resources per machine, 3 leases per machine, 250000 resources, 100000 idempotency keys") {
		t.Errorf("status = %v:\n%s\nwant the quotas in force", err, out)
	}
	for _, bad := range []struct {
		token string
		args  []string
		want  string
	}{
		{c.Tokens.Admin, []string{"limits", "set"}, "nothing to set"},
		{c.Tokens.Admin, []string{"limits", "set", "--resources", "-1"}, "must not be negative"},
		{c.Tokens.Query, []string{"limits", "set", "--resources", "9"}, "403"},
	} {
		if out, err := run(bad.token, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v = %v (%s), want an error with %q", bad.args, err, out, bad.want)
		}
	}
}

// The audit file is created 0600 and gets JSON lines naming the node.
func TestOpenAuditLog(t *testing.T) {
	cfg := config.Default()
	cfg.Node.ID = "node-b"
	if l, closer, err := openAuditLog(cfg); err != nil || l != nil || closer.Close() != nil {
		t.Fatalf("openAuditLog(no file) = %v, %v; want the main log", l, err)
	}
	cfg.Log.AuditFile = filepath.Join(t.TempDir(), "audit.jsonl")
	l, closer, err := openAuditLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("audit", "audit", true, "action", "token.issue")
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cfg.Log.AuditFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit file: %v, %v; want mode 0600", fi, err)
	}
	data, _ := os.ReadFile(cfg.Log.AuditFile)
	var line map[string]any
	if err := json.Unmarshal(data, &line); err != nil || line["node"] != "node-b" || line["action"] != "token.issue" {
		t.Errorf("audit file holds %q (%v), want one JSON line of node-b", data, err)
	}
	cfg.Log.AuditFile = filepath.Join(t.TempDir(), "missing", "audit.jsonl")
	if _, _, err := openAuditLog(cfg); err == nil || !strings.Contains(err.Error(), "log.audit_file") {
		t.Errorf("openAuditLog(in a missing dir) = %v, want an error naming log.audit_file", err)
	}
}
