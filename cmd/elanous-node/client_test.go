package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// Tests of the client commands against httptest servers that play a
// candidate's answers (no cluster logic). The end-to-end tests run them
// against real candidates.

var (
	cliTokenA = strings.Repeat("a1", 32)
	cliTokenB = strings.Repeat("b2", 32)
)

// fakeCandidate answers the endpoints the client commands use and records
// what it saw.
type fakeCandidate struct {
	*httptest.Server
	machine string

	mu     sync.Mutex
	leader string // holder this candidate reports
	gen    uint64
	reqs   []string // "METHOD URI auth=<token prefix or ->"
	bodies []string
	status int         // when non-zero, every authenticated request answers it
	events chan string // each request's "METHOD path", if set
}

func newFakeCandidate(t *testing.T, machine, leader string, gen uint64) *fakeCandidate {
	f := &fakeCandidate{machine: machine, leader: leader, gen: gen}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeCandidate) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if auth == "" {
		auth = "-"
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, r.Method+" "+r.RequestURI+" auth="+auth)
	f.bodies = append(f.bodies, string(body))
	status, leader, gen, events := f.status, f.leader, f.gen, f.events
	f.mu.Unlock()
	if events != nil {
		defer func() { events <- r.Method + " " + r.URL.Path }()
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/primary" {
		json.NewEncoder(w).Encode(wire.Primary{Known: leader != "", Holder: leader, Generation: gen})
		return
	}
	if status != 0 {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(wire.Error{Error: "scripted", Message: http.StatusText(status)})
		return
	}
	if auth == "-" {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(wire.Error{Error: wire.CodeUnauthorized, Message: "no token"})
		return
	}
	switch {
	case r.URL.Path == "/v1/cluster/status":
		state := "Follower"
		if leader == f.machine {
			state = "Leader"
		}
		json.NewEncoder(w).Encode(wire.ClusterStatus{Machine: f.machine, State: state, Term: gen, Generation: gen,
			CommitIndex: 10, AppliedIndex: 10, Voter: true, Counts: wire.Counts{Resources: 2, Leases: 1, Tokens: 3}})
	case r.URL.Path == "/v1/resources" || r.URL.Path == "/v1/leases/port" && r.Method == http.MethodGet || r.URL.Path == "/v1/tokens/member" && r.Method == http.MethodGet:
		io.WriteString(w, "[]")
	case r.URL.Path == "/v1/leases/port" && r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(wire.PortLease{ID: "port-lease:31450", Port: 31450, LeaseID: "L1", Machine: "mbp",
			Purpose: "e2e", TTLMs: 600000, Generation: gen, Fence: 9})
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/v1/tokens/member":
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"machine":"mbp","token":"`+cliTokenB+`","issuedAt":"2025-01-01T00:00:00Z"}`)
	default:
		io.WriteString(w, "{}")
	}
}

func (f *fakeCandidate) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

// runCLI runs the client commands under a root like the real one.
func runCLI(ctx context.Context, args ...string) (string, string, error) {
	return runUnder(ctx, []*cobra.Command{newStatusCmd(), newTokenCmd(), newLeaseCmd(), newResourcesCmd(), newMemberCmd(), newJoinCmd()}, args...)
}

// runUnder runs args under a root like the real one that holds only cmds,
// and returns what it wrote to stdout and stderr.
func runUnder(ctx context.Context, cmds []*cobra.Command, args ...string) (string, string, error) {
	root := &cobra.Command{Use: "elanous-node", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("config", "", "path to elanous.yaml")
	root.AddCommand(cmds...)
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStatusCmd_JSON(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 3)
	b := newFakeCandidate(t, "node-b", "node-a", 3)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	t.Setenv(tokenEnv, cliTokenA)
	out, stderr, err := runCLI(t.Context(), "status", "--data-dir", t.TempDir(),
		"--candidates", a.URL+","+b.URL+","+dead.URL, "--json")
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, stderr)
	}
	var report statusReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(report.Candidates) != 3 {
		t.Fatalf("candidates = %d, want 3\n%s", len(report.Candidates), out)
	}
	var got []string
	for _, c := range report.Candidates {
		got = append(got, c.Machine+"|"+c.State+"|"+yesNo(c.Reachable))
	}
	if want := []string{"node-a|Leader|yes", "node-b|Follower|yes", "||no"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("rows = %q, want %q", got, want)
	}
	if report.Primary.Holder != "node-a" || report.Primary.Generation != 3 || report.Primary.URL != a.URL {
		t.Errorf("primary = %+v, want node-a at generation 3 (%s)", report.Primary, a.URL)
	}
	if report.Counts != (wire.Counts{Resources: 2, Leases: 1, Tokens: 3}) {
		t.Errorf("counts = %+v", report.Counts)
	}
	for _, f := range []*fakeCandidate{a, b} {
		for _, r := range f.seen() {
			if strings.HasPrefix(r, "GET /v1/primary") != strings.HasSuffix(r, "auth=-") {
				t.Errorf("%s: %s — want a token on every request but /v1/primary", f.machine, r)
			}
		}
	}
	table, _, err := runCLI(t.Context(), "status", "--data-dir", t.TempDir(), "--candidates", a.URL+","+b.URL)
	if err != nil || !strings.Contains(table, "Leader") || !strings.Contains(table, "primary: node-a (generation 3)") {
		t.Errorf("status table (%v):\n%s", err, table)
	}
}

func TestStatusCmd_NoneReachable(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	t.Setenv(tokenEnv, cliTokenA)
	_, _, err := runCLI(t.Context(), "status", "--data-dir", t.TempDir(), "--candidates", dead.URL)
	if err == nil || !strings.Contains(err.Error(), "no candidate is reachable") {
		t.Errorf("status with no reachable candidate: err = %v", err)
	}
}

func TestClientCmd_TokenSources(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-b", 2)
	b := newFakeCandidate(t, "node-b", "node-b", 2)
	cands := "node-a=" + a.URL + ",node-b=" + b.URL

	t.Run("no token anywhere", func(t *testing.T) {
		t.Setenv(tokenEnv, "")
		_, _, err := runCLI(t.Context(), "resources", "list", "--data-dir", t.TempDir(), "--candidates", cands)
		if err == nil || !strings.Contains(err.Error(), tokenEnv) || !strings.Contains(err.Error(), "join") {
			t.Errorf("err = %v, want a hint naming %s and join", err, tokenEnv)
		}
	})
	t.Run("malformed environment token is not echoed", func(t *testing.T) {
		t.Setenv(tokenEnv, "secret-value")
		_, _, err := runCLI(t.Context(), "resources", "list", "--data-dir", t.TempDir(), "--candidates", cands)
		if err == nil || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("err = %v, want a refusal without the value", err)
		}
	})
	t.Run("group-readable token file", func(t *testing.T) {
		t.Setenv(tokenEnv, "")
		p := writeSecret(t, cliTokenA, 0o644)
		_, _, err := runCLI(t.Context(), "resources", "list", "--data-dir", t.TempDir(), "--candidates", cands, "--token-file", p)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("err = %v, want the chmod 600 hint", err)
		}
	})
	t.Run("join token only to the joined address", func(t *testing.T) {
		t.Setenv(tokenEnv, "")
		dir := t.TempDir()
		if err := member.WriteJoinFile(dir, member.Join{URL: a.URL, Machine: "mbp", Tokens: member.Tokens{member.ScopeMember: cliTokenA}}); err != nil {
			t.Fatal(err)
		}
		before := len(b.seen())
		if _, stderr, err := runCLI(t.Context(), "resources", "list", "--data-dir", dir, "--candidates", cands); err != nil {
			t.Fatalf("resources list: %v\n%s", err, stderr)
		}
		for _, r := range b.seen()[before:] {
			if !strings.HasSuffix(r, "auth=-") {
				t.Errorf("b (the primary, not joined) saw a token: %s", r)
			}
		}
		if last := a.seen()[len(a.seen())-1]; last != "GET /v1/resources?consistent=true auth="+cliTokenA {
			t.Errorf("a's last request = %q, want the list with the joined token", last)
		}
	})
	t.Run("join file with mode 0644 is refused", func(t *testing.T) {
		t.Setenv(tokenEnv, "")
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "control"), 0o700)
		os.WriteFile(filepath.Join(dir, "control", "join.json"), []byte(`{"url":"`+a.URL+`","machine":"mbp","token":"`+cliTokenA+`"}`), 0o644)
		os.Chmod(filepath.Join(dir, "control", "join.json"), 0o644)
		_, _, err := runCLI(t.Context(), "resources", "list", "--data-dir", dir, "--candidates", cands)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), cliTokenA) {
			t.Errorf("err = %v, want the chmod 600 refusal without the token", err)
		}
	})
}

func TestJoinCmd(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 1)
	t.Run("bare machine token", func(t *testing.T) {
		dir := t.TempDir()
		out, stderr, err := runCLI(t.Context(), "join", "--url", a.URL+"/", "--token-file", writeSecret(t, cliTokenA+"\n", 0o600),
			"--machine", "mbp", "--data-dir", dir)
		if err != nil {
			t.Fatalf("join: %v\n%s", err, stderr)
		}
		for _, want := range []string{"checking " + a.URL, "primary node-a (generation 1)", "token accepted"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("progress lacks %q:\n%s", want, stderr)
			}
		}
		if !strings.Contains(out, "mode 0600") || strings.Contains(out+stderr, cliTokenA) {
			t.Errorf("output:\n%s%s", out, stderr)
		}
		j, err := member.ReadJoinFile(dir)
		if err != nil || j.URL != a.URL || j.Machine != "mbp" || j.Tokens[member.ScopeMember] != cliTokenA {
			t.Errorf("join file = %+v, %v", j, err)
		}
	})
	t.Run("tokens.json keeps its scopes", func(t *testing.T) {
		dir := t.TempDir()
		_, stderr, err := runCLI(t.Context(), "join", "--url", a.URL, "--data-dir", dir, "--offline",
			"--token-file", writeSecret(t, `{"query":"`+cliTokenB+`"}`, 0o600))
		if err != nil {
			t.Fatalf("join: %v\n%s", err, stderr)
		}
		j, err := member.ReadJoinFile(dir)
		if err != nil || len(j.Tokens) != 1 || j.Tokens[member.ScopeQuery] != cliTokenB {
			t.Errorf("join file = %+v, %v; want only the query token", j, err)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		a.mu.Lock()
		a.status = http.StatusUnauthorized
		a.mu.Unlock()
		defer func() { a.mu.Lock(); a.status = 0; a.mu.Unlock() }()
		dir := t.TempDir()
		_, _, err := runCLI(t.Context(), "join", "--url", a.URL, "--machine", "mbp", "--data-dir", dir,
			"--token-file", writeSecret(t, cliTokenA, 0o600))
		if err == nil || !strings.Contains(err.Error(), "does not accept this token") {
			t.Errorf("err = %v", err)
		}
		if _, err := os.Stat(member.JoinPath(dir)); !os.IsNotExist(err) {
			t.Errorf("a join file was written despite the refusal")
		}
	})
}

func TestLeaseCmd_AcquireAndHold(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 4)
	t.Setenv(tokenEnv, cliTokenA)
	out, stderr, err := runCLI(t.Context(), "lease", "acquire", "--data-dir", t.TempDir(), "--candidates", a.URL,
		"--machine", "mbp", "--purpose", "e2e", "--exclude", "31451,31452", "--json")
	if err != nil {
		t.Fatalf("lease acquire: %v\n%s", err, stderr)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("output is not one line:\n%s", out)
	}
	var lease wire.PortLease
	if err := json.Unmarshal([]byte(out), &lease); err != nil || lease.Port != 31450 || lease.LeaseID != "L1" {
		t.Errorf("lease = %+v, %v", lease, err)
	}
	a.mu.Lock()
	acquire := a.bodies[len(a.bodies)-1]
	a.mu.Unlock()
	if acquire != `{"machine":"mbp","purpose":"e2e","ttlMs":600000,"excluded":[31451,31452]}` {
		t.Errorf("acquire body = %s", acquire)
	}

	events := a.watch()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var holdErr bytes.Buffer
	go func() {
		_, stderr, err := runCLI(ctx, "lease", "acquire", "--data-dir", t.TempDir(), "--candidates", a.URL,
			"--machine", "mbp", "--purpose", "e2e", "--hold", "--renew-interval", "100ms")
		holdErr.WriteString(stderr)
		done <- err
	}()
	// A second renewal means the first (StartPortLease's) completed.
	waitEvent(t, events, "POST /v1/leases/port/31450/heartbeat")
	waitEvent(t, events, "POST /v1/leases/port/31450/heartbeat")
	cancel()
	waitEvent(t, events, "DELETE /v1/leases/port/31450")
	if err := <-done; err != nil {
		t.Fatalf("lease acquire --hold: %v\n%s", err, holdErr.String())
	}
	if !strings.Contains(holdErr.String(), "released port 31450") {
		t.Errorf("progress:\n%s", holdErr.String())
	}
}

// watch makes the fake candidate report every request it serves on the
// returned channel (see waitEvent).
func (f *fakeCandidate) watch() <-chan string {
	events := make(chan string, 64)
	f.mu.Lock()
	f.events = events
	f.mu.Unlock()
	return events
}

// runMemberUntilHeartbeat runs "member run" as machine mbp against a until a
// sees its first machine heartbeat (which follows both registrations), stops
// it, and returns its stderr.
func runMemberUntilHeartbeat(t *testing.T, a *fakeCandidate, events <-chan string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
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
	return logs
}

// waitEvent waits for a request the fake candidate reports, with a deadline.
func waitEvent(t *testing.T, events <-chan string, want string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case got := <-events:
			if got == want {
				return
			}
		case <-deadline.C:
			t.Fatalf("no %s within 10s", want)
		}
	}
}

func TestMemberRunCmd(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 1)
	events := a.watch()
	t.Setenv(tokenEnv, cliTokenA)
	logs := runMemberUntilHeartbeat(t, a, events)
	if strings.Contains(logs, cliTokenA) || !strings.Contains(logs, "member registered") {
		t.Errorf("logs:\n%s", logs)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var machineReg, instanceReg wire.RegisterRequest
	var regs []string
	for i, r := range a.reqs {
		if strings.HasPrefix(r, "POST /v1/resources/register") {
			regs = append(regs, a.bodies[i])
		}
	}
	if len(regs) < 2 {
		t.Fatalf("registers = %d", len(regs))
	}
	json.Unmarshal([]byte(regs[0]), &machineReg)
	json.Unmarshal([]byte(regs[1]), &instanceReg)
	if machineReg.ID != "machine:mbp" || machineReg.Machine != "mbp" || machineReg.TTLMs != 600000 || machineReg.Attrs["load"] == nil {
		t.Errorf("machine register = %+v", machineReg)
	}
	if instanceReg.ID != "instance:mbp/member" || instanceReg.Endpoint != "http://10.0.0.9:31414" || instanceReg.Kind != "instance" {
		t.Errorf("instance register = %+v", instanceReg)
	}
}

// untilAnswered tries an idempotent call again while the answer is
// retryable (unreachable, 503), and stops at the first other answer or when
// its context ends.
func TestUntilAnswered(t *testing.T) {
	f := newFakeCandidate(t, "node-a", "node-a", 2)
	c, err := member.NewClient(member.ClientConfig{URL: f.URL, Token: cliTokenA})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = untilAnswered(context.Background(), c, func(context.Context) error {
		if calls++; calls < 3 {
			return fmt.Errorf("add: %w", member.ErrUnreachable)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("untilAnswered = %v after %d calls, want nil after 3 (two unreachable, then an answer)", err, calls)
	}

	refused := errors.New("409 peer-exists")
	calls = 0
	if err := untilAnswered(context.Background(), c, func(context.Context) error { calls++; return refused }); !errors.Is(err, refused) || calls != 1 {
		t.Errorf("untilAnswered = %v after %d calls, want the refusal after 1", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*retryPause)
	defer cancel()
	calls = 0
	err = untilAnswered(ctx, c, func(context.Context) error { calls++; return member.ErrUnreachable })
	if !errors.Is(err, member.ErrUnreachable) || calls < 2 || ctx.Err() == nil {
		t.Errorf("untilAnswered = %v after %d calls, want the last unreachable error once the context ended", err, calls)
	}
}
