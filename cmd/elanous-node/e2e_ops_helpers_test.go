package main

// Helpers of the operations end-to-end tests (e2e_ops_test.go,
// e2e_upgrade_test.go): running CLI commands, the previous release's binary
// built from git, and clients that retry once as members do.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// previousRelease is the commit of the previous release: the last build
// before format 2 (there is no tag). The upgrade tests build it from git.
const previousRelease = "8e4068a"

// cliResult is what a CLI command printed and its exit status.
type cliResult struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// runBin runs this build's elanous-node with args and the extra environment,
// bounded by 2 minutes.
func runBin(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2eBinary(t), args...)
	cmd.Env = childEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("elanous-node %s still running after 2 minutes (killed)\n%s", strings.Join(args, " "), res)
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run elanous-node %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// client runs a CLI command with token against every candidate (and the
// cluster's CA with TLS).
func (c *e2eCluster) client(token string, args ...string) cliResult {
	c.t.Helper()
	args = append(args, "--candidates", c.cliCandidates())
	if c.caFile != "" {
		args = append(args, "--ca-file", c.caFile)
	}
	return runBin(c.t, []string{tokenEnv + "=" + token}, args...)
}

// admin runs a CLI command with the admin token against every candidate.
func (c *e2eCluster) admin(args ...string) cliResult {
	c.t.Helper()
	return c.client(c.tokens.Admin, args...)
}

// startWith runs `serve --config` for nd with the binary bin.
func (c *e2eCluster) startWith(nd *e2eNode, bin string) {
	c.t.Helper()
	name := nd.id
	if nd.starts > 0 {
		name = fmt.Sprintf("%s-run%d", nd.id, nd.starts+1)
	}
	nd.starts++
	nd.proc = startProcBin(c.t, bin, nd.dir, name, childEnv(), "serve", "--config", nd.config)
}

// waitReady polls nd's /v1/ready until it answers 200.
func (c *e2eCluster) waitReady(nd *e2eNode, timeout time.Duration) {
	c.t.Helper()
	testutil.Poll(c.t, nd.id+" ready", timeout, func() error {
		_, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/ready", "", nil), http.StatusOK)
		return err
	})
}

// previousReleaseBinary returns the elanous-node binary of the previous
// release, built on first use from the commit in this repository (git
// archive, then go build) into the directory TestMain removes. A clone
// without that commit fails the test: CI runs on a full clone.
func previousReleaseBinary(t *testing.T) string {
	t.Helper()
	e2eBinary(t) // skips under -short; creates e2eBuild.dir
	oldBuild.once.Do(func() {
		start := time.Now()
		oldBuild.path, oldBuild.err = buildRelease(e2eBuild.dir, previousRelease)
		oldBuild.took = time.Since(start)
	})
	if oldBuild.err != nil {
		t.Fatalf("build the previous release %s: %v", previousRelease, oldBuild.err)
	}
	t.Logf("previous release %s built in %s", previousRelease, oldBuild.took.Round(time.Millisecond))
	return oldBuild.path
}

var oldBuild struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

func buildRelease(dir, commit string) (string, error) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("this test builds the previous release from git, and the source is not in a git checkout: %v", err)
	}
	repo := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		return "", fmt.Errorf("commit %s is not in this clone (a shallow clone?); the upgrade tests need it: run `git fetch --unshallow` or clone the full history", commit)
	}
	src := filepath.Join(dir, "release-"+commit)
	archive := exec.Command("git", "-C", repo, "archive", "--format=tar", commit)
	out, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	var gitErr bytes.Buffer
	archive.Stderr = &gitErr
	if err := archive.Start(); err != nil {
		return "", err
	}
	if err := untar(out, src); err != nil {
		_ = archive.Wait()
		return "", fmt.Errorf("git archive %s: %w", commit, err)
	}
	if err := archive.Wait(); err != nil {
		return "", fmt.Errorf("git archive %s: %v: %s", commit, err, gitErr.String())
	}
	bin := filepath.Join(dir, "elanous-node-"+commit)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/elanous-node")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// untar extracts the regular files and directories of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("archive entry %q escapes the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// retryingClient writes through the cluster as a member does: to the
// primary it resolves over every candidate, and after a 503 or a connection
// error it resolves again and retries once. A write that fails twice is a
// failure.
type retryingClient struct {
	c                      *member.Client
	mu                     sync.Mutex
	ops, retries, failures int            // guarded by mu
	errs                   []string       // the failures; guarded by mu
	kinds                  map[string]int // the failures by status and code; guarded by mu
}

func (c *e2eCluster) newRetryingClient(token string) *retryingClient {
	c.t.Helper()
	var cands []member.Candidate
	for _, nd := range c.nodes {
		cands = append(cands, member.Candidate{Machine: nd.id, URL: nd.url, Tokens: member.Tokens{member.ScopeMember: token}})
	}
	httpc := testutil.NewClient(5*time.Second, true)
	r, err := member.NewResolver(member.ResolverConfig{Candidates: cands, Role: member.ScopeMember, HTTPClient: httpc, Timeout: 2 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := member.NewClient(member.ClientConfig{Resolver: r, HTTPClient: httpc})
	if err != nil {
		c.t.Fatal(err)
	}
	return &retryingClient{c: cl, kinds: map[string]int{}}
}

// do runs call, and once more after a retryable failure; it reports whether
// it succeeded.
func (rc *retryingClient) do(call func(context.Context, *member.Client) error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := call(ctx, rc.c)
	retried := false
	if err != nil && member.IsRetryable(err) {
		retried = true
		if _, rerr := rc.c.Reresolve(ctx); rerr == nil {
			err = call(ctx, rc.c)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ops++
	if retried {
		rc.retries++
	}
	if err != nil {
		rc.failures++
		rc.errs = append(rc.errs, err.Error())
		kind := "unreachable"
		if status := member.StatusCode(err); status != 0 {
			kind = fmt.Sprintf("%d %s", status, member.ErrorCode(err))
		}
		rc.kinds[kind]++
	}
	return err == nil
}

// loadWriter is one client writing in a loop until stopped: it registers a
// new machine each round and heartbeats the ones it registered, recording
// the acknowledged registrations.
type loadWriter struct {
	rc   *retryingClient
	stop chan struct{}
	done chan struct{}
}

func (c *e2eCluster) startLoad(a *ackedWrites, name string) *loadWriter {
	w := &loadWriter{rc: c.newRetryingClient(c.tokens.Member), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var mine []string
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			id := fmt.Sprintf("machine:%s-%d", name, i)
			req := wire.RegisterRequest{ID: id, Kind: "machine", Name: name, Machine: fmt.Sprintf("%s-%d", name, i), TTLMs: 600_000, ObservedAt: time.Now().UnixMilli()}
			if w.rc.do(func(ctx context.Context, cl *member.Client) error { _, err := cl.Register(ctx, req); return err }) {
				a.resource(id, "primary")
				mine = append(mine, id)
			} else if !testutil.Pause(w.stop, 50*time.Millisecond) { // a member backs off after a failure
				return
			}
			if len(mine) > 0 {
				hb := mine[i%len(mine)]
				w.rc.do(func(ctx context.Context, cl *member.Client) error {
					_, err := cl.HeartbeatResource(ctx, hb, nil)
					return err
				})
			}
			if !testutil.Pause(w.stop, 5*time.Millisecond) {
				return
			}
		}
	}()
	return w
}

func (w *loadWriter) halt() {
	close(w.stop)
	<-w.done
}
