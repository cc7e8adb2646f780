package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// fakeNode is a shell script standing in for elanous-node: it prints its
// arguments and sleeps, so process handling is tested without the server.
func fakeNode(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-node")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho \"args: $*\"\necho \"panic: pretend\" >&2\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := New(Config{Bin: fakeNode(t), Dir: t.TempDir(), IPs: []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
		Launch: func(_ int, name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNew_WritesConfigsAndTokens(t *testing.T) {
	c := newTestCluster(t)
	for _, n := range c.Nodes {
		tok := filepath.Join(n.DataDir, "control", "tokens.json")
		fi, err := os.Stat(tok)
		if err != nil {
			t.Fatalf("tokens file of %s: %v", n.Name, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("tokens file of %s has mode %v, want 0600", n.Name, fi.Mode().Perm())
		}
		var tf wire.TokensFile
		b, _ := os.ReadFile(tok)
		if err := json.Unmarshal(b, &tf); err != nil || tf != c.Tokens || len(tf.Admin) != 64 {
			t.Errorf("tokens file of %s = %s, %v", n.Name, b, err)
		}
		cfg, _ := os.ReadFile(n.config)
		for _, want := range []string{`"id": "` + n.Name + `"`, `"bootstrap": true`, `"machine": "node-c"`, `"election_timeout": "500ms"`,
			`"leader_lease_timeout": "250ms"`, `"allow_plaintext": true`, `"file": "` + tok + `"`} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config of %s lacks %q:\n%s", n.Name, want, cfg)
			}
		}
	}
}

func TestCluster_ProcessLifecycle(t *testing.T) {
	c := newTestCluster(t)
	if err := c.Start(0); err != nil {
		t.Fatalf("Start(0) = %v", err)
	}
	if err := c.Start(0); err == nil {
		t.Errorf("Start(0) twice = nil, want an error")
	}
	if !c.Running(0) || c.Nodes[0].Epoch() != 1 {
		t.Errorf("after Start: Running = %v, Epoch = %d", c.Running(0), c.Nodes[0].Epoch())
	}
	waitPanics(t, c, 1)
	c.Pause(0)
	c.Resume(0)
	if err := c.Restart(0); err != nil {
		t.Fatalf("Restart(0) = %v", err)
	}
	if c.Nodes[0].Epoch() != 2 {
		t.Errorf("Epoch after restart = %d, want 2", c.Nodes[0].Epoch())
	}
	waitPanics(t, c, 2)
	c.Pause(0) // a paused node must still stop on SIGTERM
	if !c.Stop(0, 5*time.Second) {
		t.Errorf("Stop(0) of a paused node needed SIGKILL")
	}
	if c.Running(0) {
		t.Errorf("Running(0) after Stop = true")
	}
	log, _ := os.ReadFile(c.Nodes[0].LogPath)
	if !strings.Contains(string(log), "args: serve --config") {
		t.Errorf("node log lacks the serve command line:\n%s", log)
	}
}

// waitPanics polls the fake's log until it has printed n panic lines.
func waitPanics(t *testing.T, c *Cluster, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d panic lines in the fake's log", n), 5*time.Second, func() bool {
		return len(c.PanicLines()) >= n
	})
	if got := c.PanicLines(); len(got) != n {
		t.Fatalf("PanicLines() = %q, want %d (one per start of the fake)", got, n)
	}
}
