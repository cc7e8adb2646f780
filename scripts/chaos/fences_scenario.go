package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// fencePort is the port the fences scenario's holders take: the top of the
// band, which the workload's lease clients (lowest free port first) do not
// reach.
const fencePort = wire.DefaultBandEnd

// fenceTTL is the holders' lease TTL.
const fenceTTL = 2 * time.Second

// storeWrite is one write the downstream store received and its verdict.
type storeWrite struct {
	fenceWrite
	admitted bool
	reason   string
	at       time.Time
}

// fenceStore is the downstream service of the fences scenario: it admits a
// write by the monotonic check of a member.Guard, and a dangerous write only
// once the cluster confirmed its fence (Guard.Confirm).
type fenceStore struct {
	guard   member.Guard
	cluster member.FenceChecker
	mu      sync.Mutex
	writes  []storeWrite // guarded by mu
}

func (s *fenceStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fw fenceWrite
	if err := json.NewDecoder(r.Body).Decode(&fw); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err := s.guard.Admit("store", fw.Fence)
	if err == nil && fw.Dangerous {
		_, err = s.guard.Confirm(r.Context(), s.cluster, "store", fw.Port, fw.Fence)
	}
	rec := storeWrite{fenceWrite: fw, admitted: err == nil, at: time.Now()}
	if err != nil {
		rec.reason = err.Error()
	}
	s.mu.Lock()
	s.writes = append(s.writes, rec)
	s.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// find returns the first write that matches keep, if any.
func (s *fenceStore) find(keep func(storeWrite) bool) (storeWrite, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writes {
		if keep(w) {
			return w, true
		}
	}
	return storeWrite{}, false
}

// holderProc is a running fence holder (fenceHolder) and what it printed.
type holderProc struct {
	name     string
	cmd      *exec.Cmd
	stderr   bytes.Buffer
	acquired chan holderEvent // the "acquired" or "failed" event
	exited   chan struct{}
}

// startHolder runs `chaos fence-holder` for machine under token, in its
// own process group.
func startHolder(e *env, machine, token, store string) (*holderProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{fenceHolderCmd, "--targets", strings.Join(nodeURLs(e), ","), "--machine", machine,
		"--port", strconv.Itoa(fencePort), "--ttl", fenceTTL.String(), "--store", store}
	if ca := e.c.CAFile(); ca != "" {
		args = append(args, "--ca-file", ca)
	}
	h := &holderProc{name: machine, acquired: make(chan holderEvent, 1), exited: make(chan struct{})}
	h.cmd = exec.Command(exe, args...)
	h.cmd.Env = append(os.Environ(), fenceTokenEnv+"="+token)
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	h.cmd.Stderr = &h.stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(h.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev holderEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch ev.Event {
			case "acquired", "failed":
				select {
				case h.acquired <- ev:
				default:
				}
			case "lost":
				e.logf("%s: lost its lease: %s", machine, ev.Detail)
			}
		}
		_ = h.cmd.Wait()
	}()
	return h, nil
}

func (h *holderProc) signal(sig syscall.Signal) { _ = syscall.Kill(-h.cmd.Process.Pid, sig) }

// stop resumes the holder, asks it to release and exit, and kills it after 5 s.
func (h *holderProc) stop() {
	h.signal(syscall.SIGCONT)
	h.signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		h.signal(syscall.SIGKILL)
		<-h.exited
	}
}

// lease waits for the holder's grant.
func (h *holderProc) lease(ctx context.Context) (holderEvent, error) {
	select {
	case ev := <-h.acquired:
		if ev.Event != "acquired" {
			return ev, fmt.Errorf("%s: %s", h.name, ev.Detail)
		}
		return ev, nil
	case <-h.exited:
		return holderEvent{}, fmt.Errorf("%s exited before its grant: %s", h.name, h.stderr.String())
	case <-time.After(20 * time.Second):
		return holderEvent{}, fmt.Errorf("%s: no grant within 20s", h.name)
	case <-ctx.Done():
		return holderEvent{}, ctx.Err()
	}
}

func nodeURLs(e *env) []string {
	var out []string
	for _, n := range e.c.Nodes {
		out = append(out, n.URL)
	}
	return out
}

// waitFor polls cond every 50 ms for up to d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

// fencesFaults is the fences scenario (ARCHITECTURE.md, "Fences for
// downstream"): holder A takes fencePort and writes to a downstream store
// guarded by a member.Guard; A is SIGSTOPped until its lease expires and
// holder B is granted the port and writes; then A wakes and writes with its
// old fence. The store must refuse that write (the monotonic check), and
// POST /v1/fences/check through every node, `elanous-node lease check` and a
// guard that never saw B's fence (Confirm) must all call A's fence stale,
// with B's as the current one. Any admitted write of A after B's first is a
// violation.
func fencesFaults(ctx context.Context, e *env) error {
	// The scenario runs to its end even when the fault window closes
	// first: its checks are the point.
	ctx = context.WithoutCancel(ctx)
	httpc, err := fenceHTTPClient("", e.c.ClientTLS())
	if err != nil {
		return err
	}
	admin, err := newAnyNode(nodeURLs(e), e.c.Tokens.Admin, httpc)
	if err != nil {
		return err
	}
	query, err := newAnyNode(nodeURLs(e), e.c.Tokens.Query, httpc)
	if err != nil {
		return err
	}
	tokens := map[string]string{}
	for _, m := range []string{"fence-a", "fence-b"} {
		var tok wire.IssuedToken
		err := admin.do(ctx, func(c *member.Client) (err error) {
			tok, err = c.IssueMemberToken(ctx, m)
			return err
		})
		if err != nil {
			e.violate("fence-setup", fmt.Sprintf("issue a token for %s: %v", m, err))
			return err
		}
		tokens[m] = tok.Token
	}

	store := &fenceStore{cluster: query}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: store, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	storeURL := "http://" + ln.Addr().String()

	a, la, err := holdFence(ctx, e, "fence-a", tokens["fence-a"], storeURL)
	if err != nil {
		return err
	}
	defer a.stop()
	if !writesAdmitted(ctx, e, store, "fence-a") {
		return errors.New("fence-a never wrote")
	}

	e.logf("SIGSTOP fence-a until its lease expires")
	a.signal(syscall.SIGSTOP)
	paused := time.Now()
	var staleErr error
	if !waitFor(ctx, fenceTTL+15*time.Second, func() bool {
		_, staleErr = query.CheckFence(ctx, la.Port, la.Fence)
		return errors.Is(staleErr, member.ErrStaleFence)
	}) {
		e.violate("fence", fmt.Sprintf("fence %d stayed valid %s after its holder stopped renewing (last: %v)", la.Fence, time.Since(paused).Round(time.Millisecond), staleErr))
		return errors.New("fence-a's lease never expired")
	}
	e.logf("fence %d is stale %s after the pause: %v", la.Fence, time.Since(paused).Round(time.Millisecond), staleErr)

	b, lb, err := holdFence(ctx, e, "fence-b", tokens["fence-b"], storeURL)
	if err != nil {
		return err
	}
	defer b.stop()
	if lb.Port != la.Port || lb.Fence <= la.Fence {
		e.violate("fence", fmt.Sprintf("fence-b got port %d fence %d, want port %d under a fence above %d", lb.Port, lb.Fence, la.Port, la.Fence))
	}
	writesAdmitted(ctx, e, store, "fence-b")

	e.logf("SIGCONT fence-a")
	woke := time.Now()
	a.signal(syscall.SIGCONT)
	var late storeWrite
	afterWake := func(w storeWrite) bool { return w.Holder == "fence-a" && w.at.After(woke) }
	if waitFor(ctx, 5*time.Second, func() (found bool) { late, found = store.find(afterWake); return found }) {
		e.logf("fence-a woke and wrote with fence %d: admitted=%v (%s)", late.Fence, late.admitted, late.reason)
	} else {
		e.violate("fence", "fence-a sent no write within 5s of waking")
	}
	firstB, _ := store.find(func(w storeWrite) bool { return w.Holder == "fence-b" && w.admitted })
	if bad, found := store.find(func(w storeWrite) bool {
		return w.Holder == "fence-a" && w.admitted && !firstB.at.IsZero() && w.at.After(firstB.at)
	}); found {
		e.violate("fence", fmt.Sprintf("the store admitted fence-a's write %d (fence %d) after fence-b's fence %d", bad.Seq, bad.Fence, firstB.Fence))
	}

	checkStaleEverywhere(ctx, e, httpc, la, lb)

	// A guard that never saw fence-b's fence admits fence-a's by the
	// monotonic check alone; Confirm must still refuse it.
	var fresh member.Guard
	_, err = fresh.Confirm(ctx, query, "fresh", la.Port, la.Fence)
	var stale *member.StaleFenceError
	if !errors.As(err, &stale) || stale.Current != lb.Fence {
		e.violate("fence", fmt.Sprintf("Guard.Confirm of the woken holder's fence %d = %v, want stale with current fence %d", la.Fence, err, lb.Fence))
	}
	e.logf("fence-a's fence %d refused by the store, every node, lease check and Confirm; fence-b's %d current", la.Fence, lb.Fence)
	return nil
}

// holdFence starts the holder machine against the store and waits for its
// grant; the caller stops the holder it returns.
func holdFence(ctx context.Context, e *env, machine, token, storeURL string) (*holderProc, holderEvent, error) {
	h, err := startHolder(e, machine, token, storeURL)
	if err != nil {
		return nil, holderEvent{}, err
	}
	l, err := h.lease(ctx)
	if err != nil {
		e.violate("fence-setup", err.Error())
		h.stop()
		return nil, holderEvent{}, err
	}
	e.logf("%s holds port %d under fence %d", machine, l.Port, l.Fence)
	return h, l, nil
}

// writesAdmitted waits up to 10s for the store to admit a confirmed
// dangerous write of holder's, and records a violation when it does not.
func writesAdmitted(ctx context.Context, e *env, store *fenceStore, holder string) bool {
	if waitFor(ctx, 10*time.Second, func() bool {
		_, ok := store.find(func(w storeWrite) bool { return w.Holder == holder && w.Dangerous && w.admitted })
		return ok
	}) {
		return true
	}
	e.violate("fence", holder+"'s writes were not admitted (a confirmed dangerous one) within 10s of its grant")
	return false
}

// checkStaleEverywhere asks every node, and `elanous-node lease check`,
// about fence a: each must answer stale with b's fence as the current one.
func checkStaleEverywhere(ctx context.Context, e *env, httpc *http.Client, a, b holderEvent) {
	for _, n := range e.c.Nodes {
		c, err := member.NewClient(member.ClientConfig{URL: n.URL, Token: e.c.Tokens.Query, HTTPClient: httpc})
		if err != nil {
			e.violate("fence", err.Error())
			continue
		}
		var stale *member.StaleFenceError
		for try := 0; ; try++ {
			_, err = c.CheckFence(ctx, a.Port, a.Fence)
			if !member.IsRetryable(err) || try == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond) // a node without a leader for a moment
		}
		if !errors.As(err, &stale) || stale.Current != b.Fence {
			e.violate("fence", fmt.Sprintf("POST /v1/fences/check of fence %d on %s = %v, want 409 stale-fence with currentFence %d", a.Fence, n.Name, err, b.Fence))
		}
	}
	args := []string{"lease", "check", "--port", strconv.Itoa(a.Port), "--fence", strconv.FormatUint(a.Fence, 10), "--candidates", strings.Join(nodeURLs(e), ",")}
	if ca := e.c.CAFile(); ca != "" {
		args = append(args, "--ca-file", ca)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.s.bin, args...)
	cmd.Env = append(os.Environ(), "ELANOUS_TOKEN="+e.c.Tokens.Query)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "is stale") {
		e.violate("fence", fmt.Sprintf("elanous-node lease check of fence %d: %v, want exit 1 saying it is stale; output %q", a.Fence, err, out))
	}
}
