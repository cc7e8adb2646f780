package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// etcd36Version is the etcd server module built for the 3.6 column.
const etcd36Version = "v3.6.16"

// failoverAttemptTimeout bounds every write of the failover loop. A write
// takes a few milliseconds on an idle loopback cluster; an etcd follower
// forwards a proposal to a dead leader and drops it silently until it hears
// of an election, so without a short deadline a client would wait out its
// whole timeout. The gap is measured to within about this much.
const failoverAttemptTimeout = 250 * time.Millisecond

// failoverRetryPause is the pause after a failed failover write, so an
// error answered at once does not spin a core the election needs.
const failoverRetryPause = 10 * time.Millisecond

// requestTimeout bounds every request of the throughput rows and the fill.
const requestTimeout = 5 * time.Second

// ensureEtcd34 returns the etcd 3.4 binary at path, installing Debian's
// etcd-server with apt-get when path is /usr/bin/etcd and missing.
func ensureEtcd34(ctx context.Context, path string, pr *printer) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && path == "/usr/bin/etcd" {
		if os.Geteuid() != 0 {
			return "", errors.New("etcd 3.4 is missing: install it with `sudo apt-get install etcd-server`, or run with --only elanous")
		}
		pr.logf("installing Debian's etcd-server with apt-get (apt-get update first)")
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "--no-install-recommends", "etcd-server"}} {
			cmd := exec.CommandContext(ctx, "apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, lastLines(string(out), 20))
			}
		}
	}
	v, err := etcdVersion(ctx, path)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(v, "3.4.") {
		return "", fmt.Errorf("%s is etcd %s, want 3.4 (pass --etcd34)", path, v)
	}
	return path, nil
}

// ensureEtcd36 returns an etcd 3.6 binary built from the Go module proxy
// through a main that calls etcdmain.Main. It builds in a module of its own
// under the user cache directory (go install refuses the server module's
// replace directives) and keeps the binary there for later runs.
func ensureEtcd36(ctx context.Context, pr *printer) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache dir for the etcd build: %w", err)
	}
	dir := filepath.Join(cache, "elanous-bench", "etcd-"+etcd36Version)
	bin := filepath.Join(dir, "etcd")
	if v, err := etcdVersion(ctx, bin); err == nil && "v"+v == etcd36Version {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	mod, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(mod)
	const mainGo = `// Command etcd is etcd's own main, built for scripts/bench/compare-etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(mainGo), 0o644); err != nil {
		return "", err
	}
	pr.logf("building etcd %s in %s (once; takes a minute or two)", etcd36Version, dir)
	tmpBin := filepath.Join(mod, "etcd")
	for _, args := range [][]string{
		{"mod", "init", "elanous-bench/etcd"},
		{"get", "go.etcd.io/etcd/server/v3@" + etcd36Version},
		{"mod", "tidy"},
		{"build", "-o", tmpBin, "."},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s (etcd %s build): %w\n%s", strings.Join(args, " "), etcd36Version, err, lastLines(string(out), 20))
		}
	}
	// A rename in one directory is atomic, so a concurrent run sees either
	// no binary or a whole one.
	if err := os.Rename(tmpBin, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// etcdVersion runs bin --version and returns its server version ("3.4.23").
func etcdVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s --version printed no version", bin)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// etcdSystem is a three-member etcd cluster on loopback, with each member's
// default settings (heartbeat 100 ms, election timeout 1000 ms).
type etcdSystem struct {
	name, bin, version, dir string
	procs                   *procs
	members                 []*etcdMember
	admin                   *clientv3.Client
}

type etcdMember struct {
	server
	args      []string
	clientURL string
}

func newEtcdSystem(name, bin, dir string, p *procs) (*etcdSystem, error) {
	v, err := etcdVersion(context.Background(), bin)
	if err != nil {
		return nil, err
	}
	return &etcdSystem{name: name, bin: bin, version: v, dir: dir, procs: p}, nil
}

func (s *etcdSystem) Name() string    { return s.name }
func (s *etcdSystem) Version() string { return s.version }

func (s *etcdSystem) Logs() []string { return logPaths(s.members) }

func (s *etcdSystem) Start(ctx context.Context) error {
	ports, err := testcluster.FreePorts(6)
	if err != nil {
		return err
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[3+i]))
	}
	var endpoints []string
	for i := range 3 {
		m := &etcdMember{server: server{name: fmt.Sprintf("m%d", i)}, clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[i])}
		mdir := filepath.Join(s.dir, m.name)
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			return err
		}
		m.dataDir, m.logPath = filepath.Join(mdir, "data"), filepath.Join(mdir, "etcd.log")
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[3+i])
		m.args = []string{
			"--name", m.name, "--data-dir", m.dataDir,
			"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", "compare-etcd-" + hex.EncodeToString(token),
			"--initial-cluster-state", "new",
			"--logger", "zap", "--log-outputs", "stderr",
		}
		s.members = append(s.members, m)
		endpoints = append(endpoints, m.clientURL)
	}
	for i := range s.members {
		if err := s.startMember(i); err != nil {
			return err
		}
	}
	s.admin, err = newEtcdClient(endpoints)
	if err != nil {
		return err
	}
	return s.WaitHealthy(ctx)
}

// etcdEnv is this process's environment without ETCD_* variables, which
// etcd would read as flags.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

func (s *etcdSystem) startMember(i int) error {
	m := s.members[i]
	return m.start(s.procs, s.bin, m.args, etcdEnv())
}

func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (s *etcdSystem) Stop() {
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	killAll(s.members)
}

// WaitHealthy waits until every member answers Status naming one leader and
// has applied within 100 entries of the others, then a Put succeeds.
func (s *etcdSystem) WaitHealthy(ctx context.Context) error {
	return testcluster.WaitFor(ctx, "a healthy etcd cluster", 60*time.Second, pollEvery, func(ctx context.Context) error {
		var leader uint64
		var minApplied, maxApplied uint64
		for i, m := range s.members {
			if m.p.Exited() {
				return fmt.Errorf("%s exited", m.name)
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := s.admin.Status(sctx, m.clientURL)
			cancel()
			if err != nil {
				return fmt.Errorf("%s status: %w", m.name, err)
			}
			if st.Leader == 0 || (i > 0 && st.Leader != leader) {
				return fmt.Errorf("%s sees leader %x, others %x", m.name, st.Leader, leader)
			}
			leader = st.Leader
			applied := st.RaftAppliedIndex
			if i == 0 || applied < minApplied {
				minApplied = applied
			}
			maxApplied = max(maxApplied, applied)
		}
		if maxApplied-minApplied > 100 {
			return fmt.Errorf("a member lags: applied %d..%d", minApplied, maxApplied)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := s.admin.Put(pctx, "bench/health", "ok")
		return err
	})
}

// pollEvery is how often the driver polls a condition (testcluster.WaitFor).
const pollEvery = 50 * time.Millisecond

func (s *etcdSystem) Leader(ctx context.Context) (int, error) {
	for _, m := range s.members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := s.admin.Status(sctx, m.clientURL)
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		for i, m2 := range s.members {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st2, err := s.admin.Status(sctx, m2.clientURL)
			cancel()
			if err == nil && st2.Header.MemberId == st.Leader {
				return i, nil
			}
		}
	}
	return 0, errors.New("no member names a leader")
}

func (s *etcdSystem) Fill(ctx context.Context, shape fillShape, n, clients int, progress func(int)) error {
	cs, err := s.clients(clients, -1)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	return runParallel(ctx, n, clients, func(ctx context.Context, w, i int) error {
		val := string(shape.register(i))
		return retry(ctx, 3, func(ctx context.Context) error {
			_, err := cs[w].Put(ctx, fmt.Sprintf("fill/%d", i), val)
			return err
		})
	}, progress)
}

// clients makes n clients, each with one connection: client i to member
// i%3, or all of them to member only when only ≥ 0.
func (s *etcdSystem) clients(n, only int) ([]*clientv3.Client, error) {
	var cs []*clientv3.Client
	for i := range n {
		m := s.members[i%len(s.members)]
		if only >= 0 {
			m = s.members[only]
		}
		c, err := newEtcdClient([]string{m.clientURL})
		if err != nil {
			closeAll(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// revokeAndClose returns a cleanup that revokes each of *leases through the
// client of the same index in cs (within a second each), then closes cs.
func revokeAndClose(cs []*clientv3.Client, leases *[]clientv3.LeaseID) func() {
	return func() {
		for i, id := range *leases {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = cs[i].Revoke(rctx, id)
			cancel()
		}
		closeAll(cs)
	}
}

func closeAll(cs []*clientv3.Client) {
	for _, c := range cs {
		c.Close()
	}
}

func (s *etcdSystem) Workers(ctx context.Context, row string, n int) ([]step, func(), error) {
	only, err := rowNode(ctx, s, row)
	if err != nil {
		return nil, nil, err
	}
	cs, err := s.clients(n, only)
	if err != nil {
		return nil, nil, err
	}
	var steps []step
	var leases []clientv3.LeaseID
	cleanup := revokeAndClose(cs, &leases)
	for i, c := range cs {
		var g clientv3.LeaseID // the client's lease, on the rows that hold one
		if row == rowLoad || row == rowRenewal {
			if g, err = grant(ctx, c, leaseTTLMs/1000); err != nil {
				cleanup()
				return nil, nil, err
			}
			leases = append(leases, g)
		}
		var st step
		switch row {
		case rowWrite, rowSingle:
			key := fmt.Sprintf("bench/%s/%d", row, i)
			val := string(registerBody(benchID(i), "bench", benchTTLMs))
			st = timed(func(ctx context.Context) error {
				_, err := c.Put(ctx, key, val)
				return err
			})
		case rowLock:
			st = etcdLockStep(c, fmt.Sprintf("bench/lock/%d", i), i)
		case rowLoad:
			key := fmt.Sprintf("bench/load/%d", i)
			beat := 0
			st = timed(func(ctx context.Context) error {
				beat++
				_, err := c.Put(ctx, key, string(seedLoad(i, beat)), clientv3.WithLease(g))
				return err
			})
		case rowRenewal:
			st = timed(func(ctx context.Context) error {
				_, err := c.KeepAliveOnce(ctx, g)
				return err
			})
		default:
			cleanup()
			return nil, nil, fmt.Errorf("unknown row %q", row)
		}
		steps = append(steps, st)
	}
	if err := warmUp(ctx, steps, row); err != nil {
		cleanup()
		return nil, nil, err
	}
	return steps, cleanup, nil
}

// timed is the step that gives each call of do requestTimeout.
func timed(do step) step {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return do(ctx)
	}
}

// grant grants a lease of ttlSeconds.
func grant(ctx context.Context, c *clientv3.Client, ttlSeconds int64) (clientv3.LeaseID, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	g, err := c.Grant(ctx, ttlSeconds)
	if err != nil {
		return 0, fmt.Errorf("grant a lease: %w", err)
	}
	return g.ID, nil
}

// openWorkers prepares the etcd side of the open row: one client per
// connection, each with a lease of the seed's TTL; a load heartbeat is a Put
// of the member's load under its key attached to the connection's lease, an
// instance heartbeat or a lease renewal a KeepAliveOnce of that lease.
func (s *etcdSystem) openWorkers(ctx context.Context, c cadence, clients int) ([]openStep, func(), error) {
	cs, err := s.clients(clients, -1)
	if err != nil {
		return nil, nil, err
	}
	var leases []clientv3.LeaseID
	cleanup := revokeAndClose(cs, &leases)
	var workers []openStep
	for _, cl := range cs {
		g, err := grant(ctx, cl, seedTTLMs/1000)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		leases = append(leases, g)
		workers = append(workers, func(ctx context.Context, k int) error {
			ctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			ev := c.event(k)
			if ev.kind == eventLoad {
				_, err := cl.Put(ctx, "open/"+strconv.Itoa(ev.member), string(seedLoad(ev.member, k)), clientv3.WithLease(g))
				return err
			}
			_, err := cl.KeepAliveOnce(ctx, g)
			return err
		})
	}
	return workers, cleanup, nil
}

// etcdLockStep alternates a compare-and-put that takes key when nobody holds
// it with a compare-and-delete that releases it only if it still holds this
// client's value: the lock shape of a port lease's acquire and release.
func etcdLockStep(c *clientv3.Client, key string, i int) step {
	held := ""
	n := 0
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if held == "" {
			n++
			val := fmt.Sprintf("client-%d-grant-%d", i, n)
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, val)).Commit()
			if err != nil {
				return err
			}
			if !r.Succeeded {
				_, _ = c.Delete(ctx, key) // left by a release whose answer was lost
				return errors.New("lock key already held")
			}
			held = val
			return nil
		}
		val := held
		held = ""
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", val)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return errors.New("lock key no longer ours")
		}
		return nil
	}
}

// warmUp runs each step once (twice for the lock row, to end released) so
// every connection is open before the clock starts.
func warmUp(ctx context.Context, steps []step, row string) error {
	times := 1
	if row == rowLock {
		times = 2
	}
	for i, st := range steps {
		for range times {
			if err := st(ctx); err != nil {
				return fmt.Errorf("warm-up of client %d: %w", i, err)
			}
		}
	}
	return nil
}

func (s *etcdSystem) Writer(ctx context.Context, i int) (step, func(), error) {
	c, err := newEtcdClient([]string{s.members[i].clientURL})
	if err != nil {
		return nil, nil, err
	}
	val := string(registerBody(benchID(0), "bench", benchTTLMs))
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, failoverAttemptTimeout)
		defer cancel()
		_, err := c.Put(ctx, "bench/failover", val)
		return err
	}, func() { c.Close() }, nil
}

func (s *etcdSystem) Kill(i int) error { return s.members[i].p.Kill() }

func (s *etcdSystem) Restart(ctx context.Context, i int) error {
	s.members[i].restarts++
	return s.startMember(i)
}

func (s *etcdSystem) Usage() []nodeUsage {
	return usageOf(s.members, s.name, "member/snap/db", "member", "snap", "db")
}

// retry calls fn up to n times with a fresh request deadline each time,
// backing off between attempts.
func retry(ctx context.Context, n int, fn func(ctx context.Context) error) error {
	var err error
	for attempt := range n {
		if attempt > 0 { // an election may be under way: back off 100 ms, 200 ms, … up to 1 s
			select {
			case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, time.Second)):
			case <-ctx.Done():
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err = fn(rctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}
