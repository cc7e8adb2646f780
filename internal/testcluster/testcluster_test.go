package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// sleeper is a process that prints a line and waits for a signal.
func sleeper(t *testing.T, group bool) Spec {
	dir := t.TempDir()
	return Spec{Name: "sleeper", Path: "/bin/sh", Args: []string{"-c", "echo hello; echo oops >&2; exec sleep 60"},
		Stdout: filepath.Join(dir, "out.log"), Stderr: filepath.Join(dir, "err.log"), Group: group, Banner: "test"}
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	err := WaitFor(context.Background(), fmt.Sprintf("%q in %s", want, path), 5*time.Second, 5*time.Millisecond,
		func(context.Context) error {
			b, _ := os.ReadFile(path)
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("log so far: %q", b)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func TestProc_StopPausedRestartKill(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			spec := sleeper(t, group)
			p, err := Start(spec)
			if err != nil {
				t.Fatal(err)
			}
			waitLog(t, spec.Stdout, "hello")
			waitLog(t, spec.Stderr, "oops")
			if err := p.Pause(); err != nil || !p.Paused() {
				t.Fatalf("Pause() = %v, Paused() = %v", err, p.Paused())
			}
			if err := p.Stop(5 * time.Second); err != nil { // a paused process still stops on SIGTERM
				t.Fatalf("Stop of a paused process = %v", err)
			}
			if !p.Exited() || p.Paused() {
				t.Fatalf("after Stop: Exited %v, Paused %v", p.Exited(), p.Paused())
			}
			q, err := p.Restart()
			if err != nil {
				t.Fatal(err)
			}
			if q.Pid() == p.Pid() {
				t.Errorf("Restart kept pid %d", p.Pid())
			}
			if err := q.Kill(); err != nil || !q.Exited() || q.ExitCode() != -1 {
				t.Fatalf("Kill() = %v, Exited %v, ExitCode %d", err, q.Exited(), q.ExitCode())
			}
			b, _ := os.ReadFile(spec.Stdout)
			if n := strings.Count(string(b), "=== test: start sleeper at"); n != 2 {
				t.Errorf("%d start banners, want 2:\n%s", n, b)
			}
			if n := strings.Count(string(b), "=== test: sleeper exited: signal: killed"); n != 1 {
				t.Errorf("%d killed banners, want 1:\n%s", n, b)
			}
			if err := q.Signal(syscall.SIGTERM); err != nil {
				t.Errorf("Signal after exit = %v, want nil", err)
			}
		})
	}
}

func TestProc_StopKillsPastItsBound(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Spec{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 1; done"},
		Stdout: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, filepath.Join(dir, "log"), "ready")
	if err := p.Stop(200 * time.Millisecond); !errors.Is(err, ErrKilled) || !p.Exited() {
		t.Fatalf("Stop of a process ignoring SIGTERM = %v (exited %v), want ErrKilled", err, p.Exited())
	}
}

func TestWaitFor(t *testing.T) {
	calls := 0
	err := WaitFor(context.Background(), "three calls", time.Second, time.Millisecond, func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("WaitFor = %v after %d calls, want nil after 3", err, calls)
	}
	err = WaitFor(context.Background(), "the impossible", 30*time.Millisecond, 5*time.Millisecond, func(context.Context) error {
		return errors.New("still no")
	})
	if err == nil || !strings.Contains(err.Error(), "the impossible: not within 30ms: still no") {
		t.Errorf("WaitFor past its deadline = %v", err)
	}
	stop := errors.New("diverged")
	calls = 0
	err = WaitFor(context.Background(), "x", time.Minute, time.Millisecond, func(context.Context) error {
		calls++
		return Final(stop)
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("WaitFor with a Final error = %v after %d calls, want it at once", err, calls)
	}
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || (p >= 31400 && p <= 31599) || p <= 0 {
			t.Errorf("FreePorts returned %d (%v)", p, ports)
		}
		seen[p] = true
	}
}

func TestNodeConfig_Doc(t *testing.T) {
	n := NodeConfig{ID: "node-a", DataDir: "/d", URL: "https://10.0.0.1:31413", Raft: "10.0.0.1:31412",
		Candidates: []Candidate{{"node-a", "https://10.0.0.1:31413", "10.0.0.1:31412"}}, TokensFile: "/t",
		Election: 300 * time.Millisecond, TLS: &TLSFiles{CA: "ca", Cert: "c", Key: "k"}}
	path := filepath.Join(t.TempDir(), "elanous.yaml")
	if err := WriteConfig(path, n.Doc()); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	var got struct {
		Node    struct{ ID, DataDir string } `json:"node"`
		HTTP    struct{ Addr, Advertise string }
		Raft    map[string]string
		Cluster struct {
			Bootstrap  bool
			Candidates []map[string]string
		}
		TLS map[string]string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.HTTP.Addr != "10.0.0.1:31413" || got.Raft["election_timeout"] != "300ms" || got.Raft["heartbeat_timeout"] != "" ||
		!got.Cluster.Bootstrap || got.Cluster.Candidates[0]["raft"] != "10.0.0.1:31412" || got.TLS["ca_file"] != "ca" {
		t.Errorf("config:\n%s", raw)
	}
}

func TestMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer q" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "elanous_up 1")
	}))
	defer srv.Close()
	if text, err := Metrics(context.Background(), http.DefaultClient, srv.URL, "q"); err != nil || text != "elanous_up 1\n" {
		t.Errorf("Metrics = %q, %v", text, err)
	}
	if _, err := Metrics(context.Background(), http.DefaultClient, srv.URL, ""); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Errorf("Metrics without the token = %v, want the 401", err)
	}
}

func TestPrimaries(t *testing.T) {
	answer := func(p wire.Primary) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/primary" {
				http.NotFound(w, r)
				return
			}
			_ = json.NewEncoder(w).Encode(p)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	a := answer(wire.Primary{Known: true, Holder: "node-a", Generation: 3})
	b := answer(wire.Primary{Known: true, Holder: "node-b", Generation: 4})
	none := answer(wire.Primary{})
	ctx, hc := context.Background(), http.DefaultClient
	if p, err := AgreedPrimary(ctx, hc, []string{a, a}); err != nil || p.Holder != "node-a" {
		t.Errorf("AgreedPrimary(a, a) = %+v, %v", p, err)
	}
	if _, err := AgreedPrimary(ctx, hc, []string{a, b}); err == nil {
		t.Errorf("AgreedPrimary(a, b) = nil error")
	}
	if _, err := AgreedPrimary(ctx, hc, []string{a, none}); err == nil {
		t.Errorf("AgreedPrimary(a, none) = nil error")
	}
	if p, err := NewestPrimary(ctx, hc, []string{none, a, b}); err != nil || p.Holder != "node-b" {
		t.Errorf("NewestPrimary = %+v, %v, want node-b", p, err)
	}
	if _, err := NewestPrimary(ctx, hc, []string{none}); err == nil {
		t.Errorf("NewestPrimary(none) = nil error")
	}
	sts := []*wire.ClusterStatus{nil, {State: "Leader", Ready: true, Term: 2}, {State: "Leader", Ready: true, Term: 5}, {State: "Leader", Term: 9}}
	if got := Leader(sts); got != 2 {
		t.Errorf("Leader = %d, want 2 (the ready leader of the highest term)", got)
	}
}
