// Command tlscost measures what TLS costs an elanous-node cluster, TLS beside
// plaintext in one run so both see the same machine:
//
//   - write throughput: `elanous-node bench` against `elanous-node dev` and
//     `elanous-node dev --tls`, alternating, --rounds times each, with the
//     CPU time the dev process (the three candidates) spent per operation —
//     the cost that does not depend on what else the machine runs;
//
//   - the failover gap: two clusters of three `serve` processes on loopback,
//     one plaintext and one TLS, whose leaders are SIGKILLed in turn
//     (--kills times each); the gap runs from the kill until both survivors
//     answer /v1/primary with a known primary of a higher generation.
//
//     go run ./scripts/tlscost --rounds 3 --duration 10s --kills 20
//
// It prints every measurement and a summary with the differences.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	bin      string
	rounds   int
	duration time.Duration
	op       string
	conc     int
	kills    int
	timeout  time.Duration
	basePort int
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "", "elanous-node binary (default: build one)")
	flag.IntVar(&o.rounds, "rounds", 2, "bench runs per mode")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of one bench run")
	flag.StringVar(&o.op, "op", "renew", "bench --op")
	flag.IntVar(&o.conc, "concurrency", 16, "bench --concurrency")
	flag.IntVar(&o.kills, "kills", 10, "leader kills per mode (0 skips the failover part)")
	flag.DurationVar(&o.timeout, "election-timeout", 500*time.Millisecond, "raft heartbeat and election timeout of the failover clusters (lease: half)")
	flag.IntVar(&o.basePort, "dev-port", 32413, "HTTP port of node-a of the dev clusters (node-b +10, node-c +20, Raft one below each)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "tlscost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := os.MkdirTemp("", "elanous-tlscost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if o.bin == "" {
		o.bin = filepath.Join(root, "elanous-node")
		fmt.Println("building", o.bin)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", o.bin, "./cmd/elanous-node").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	ver, _ := exec.Command(o.bin, "version").Output()
	fmt.Printf("binary: %s", ver)

	var tput, cpu map[bool][]float64
	if o.rounds > 0 {
		if tput, cpu, err = throughput(ctx, o, root); err != nil {
			return err
		}
	}
	var gaps map[bool][]time.Duration
	if o.kills > 0 {
		if gaps, err = failovers(ctx, o, root); err != nil {
			return err
		}
	}
	fmt.Println("\n== summary")
	if tput != nil {
		p, t := mean(tput[false]), mean(tput[true])
		fmt.Printf("bench --op %s --concurrency %d, %d runs of %s per mode\n", o.op, o.conc, o.rounds, o.duration)
		fmt.Printf("  plaintext: %s ops/s, mean %.0f\n", floats(tput[false]), p)
		fmt.Printf("  TLS:       %s ops/s, mean %.0f\n", floats(tput[true]), t)
		fmt.Printf("  TLS throughput: %+.1f %% by the means, %+.1f %% by the medians (goal: at most 15 %% less)\n",
			100*(t-p)/p, 100*(median(tput[true])-median(tput[false]))/median(tput[false]))
		pc, tc := mean(cpu[false]), mean(cpu[true])
		fmt.Printf("  server CPU per op: plaintext %s µs (mean %.0f), TLS %s µs (mean %.0f): %+.1f %%\n",
			floats(cpu[false]), pc, floats(cpu[true]), tc, 100*(tc-pc)/pc)
	}
	if gaps != nil {
		fmt.Printf("failover gap, %d SIGKILLs of the leader per mode, election timeout %s\n", o.kills, o.timeout)
		for _, tlsOn := range []bool{false, true} {
			name := "plaintext"
			if tlsOn {
				name = "TLS      "
			}
			g := gaps[tlsOn]
			fmt.Printf("  %s: mean %s, median %s, min %s, max %s\n", name, meanDur(g), pct(g, 50), pct(g, 0), pct(g, 100))
		}
		fmt.Printf("  TLS failover: mean %+dms, median %+dms (goal: at most 100 ms more)\n",
			(meanDur(gaps[true]) - meanDur(gaps[false])).Milliseconds(), (pct(gaps[true], 50) - pct(gaps[false], 50)).Milliseconds())
	}
	return nil
}

// throughput runs bench against dev and dev --tls, alternating, and returns
// the ops/s and the dev process's CPU µs per op of every run.
func throughput(ctx context.Context, o options, root string) (tput, cpu map[bool][]float64, err error) {
	tput, cpu = map[bool][]float64{}, map[bool][]float64{}
	for r := 0; r < o.rounds; r++ {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, tlsOn := range order {
			v, c, err := benchOnce(ctx, o, filepath.Join(root, fmt.Sprintf("dev-%d-%v", r, tlsOn)), tlsOn)
			if err != nil {
				return nil, nil, err
			}
			tput[tlsOn] = append(tput[tlsOn], v)
			cpu[tlsOn] = append(cpu[tlsOn], c)
		}
	}
	return tput, cpu, nil
}

// cpuTime returns the user and system CPU time process pid has used.
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses: utime is the
	// 14th field of the line, stime the 15th, in clock ticks (100 per second).
	rest := string(raw[strings.LastIndexByte(string(raw), ')')+2:])
	f := strings.Fields(rest)
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func benchOnce(ctx context.Context, o options, dir string, tlsOn bool) (opsPerSec, cpuPerOpMicros float64, err error) {
	args := []string{"dev", "--data-dir", dir, "--http-port", fmt.Sprint(o.basePort), "--log-level", "error"}
	if tlsOn {
		args = append(args, "--tls")
	}
	dev := exec.CommandContext(ctx, o.bin, args...)
	stdout, err := dev.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	dev.Stderr = io.Discard
	if err := dev.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = dev.Process.Signal(os.Interrupt)
		_ = dev.Wait()
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		return 0, 0, errors.New("dev did not become ready")
	}
	var tokens struct{ Member string }
	raw, err := os.ReadFile(filepath.Join(dir, "control", "tokens.json"))
	if err != nil {
		return 0, 0, err
	}
	if err := json.Unmarshal(raw, &tokens); err != nil {
		return 0, 0, err
	}
	scheme := "http"
	bargs := []string{"bench", "--op", o.op, "--duration", o.duration.String(), "--concurrency", fmt.Sprint(o.conc), "--json"}
	if tlsOn {
		scheme = "https"
		bargs = append(bargs, "--ca-file", filepath.Join(dir, "tls", "ca.pem"))
	}
	var urls []string
	for i := 0; i < 3; i++ {
		urls = append(urls, fmt.Sprintf("%s://127.0.0.1:%d", scheme, o.basePort+10*i))
	}
	bargs = append(bargs, "--candidates", strings.Join(urls, ","))
	bench := exec.CommandContext(ctx, o.bin, bargs...)
	bench.Env = append(os.Environ(), "ELANOUS_TOKEN="+tokens.Member)
	cpu0, err := cpuTime(dev.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	res, err := bench.Output()
	cpu1, cerr := cpuTime(dev.Process.Pid)
	if cerr != nil {
		return 0, 0, cerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("bench: %w", err)
	}
	var r struct {
		OpsPerSec float64 `json:"opsPerSec"`
		Ops       int     `json:"ops"`
		Errors    int     `json:"errors"`
		P50Ms     float64 `json:"p50Ms"`
		P99Ms     float64 `json:"p99Ms"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return 0, 0, fmt.Errorf("bench output %q: %w", res, err)
	}
	perOp := float64((cpu1 - cpu0).Microseconds()) / float64(max(r.Ops, 1))
	fmt.Printf("bench %-9s %6.0f ops/s, p50 %.2f ms, p99 %.2f ms, %d errors; server CPU %.0f µs/op\n",
		mode(tlsOn), r.OpsPerSec, r.P50Ms, r.P99Ms, r.Errors, perOp)
	return r.OpsPerSec, perOp, nil
}

func mode(tlsOn bool) string {
	if tlsOn {
		return "TLS"
	}
	return "plaintext"
}

// node is one serve process of a failover cluster.
type node struct {
	id, url, raft, dir, config string
	cmd                        *exec.Cmd
	done                       chan struct{}
}

type cluster struct {
	tls   bool
	nodes []*node
	http  *http.Client
	bin   string
}

func failovers(ctx context.Context, o options, root string) (map[bool][]time.Duration, error) {
	clusters := map[bool]*cluster{}
	for _, tlsOn := range []bool{false, true} {
		c, err := newCluster(ctx, o, filepath.Join(root, "serve-"+mode(tlsOn)), tlsOn)
		if err != nil {
			return nil, err
		}
		defer c.stop()
		clusters[tlsOn] = c
	}
	out := map[bool][]time.Duration{}
	for k := 0; k < o.kills; k++ {
		order := []bool{false, true}
		if k%2 == 1 {
			order = []bool{true, false}
		}
		for _, tlsOn := range order {
			g, err := clusters[tlsOn].killLeader(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s cluster: %w", mode(tlsOn), err)
			}
			fmt.Printf("failover %-9s %d: %s\n", mode(tlsOn), k+1, g.Round(time.Millisecond))
			out[tlsOn] = append(out[tlsOn], g)
		}
	}
	return out, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func newCluster(ctx context.Context, o options, dir string, tlsOn bool) (*cluster, error) {
	c := &cluster{tls: tlsOn, bin: o.bin, http: &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	scheme := "http"
	if tlsOn {
		scheme = "https"
		if out, err := exec.Command(o.bin, "tls", "ca", "--out", filepath.Join(dir, "tls")).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tls ca: %w\n%s", err, out)
		}
		pem, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		c.http.Transport = &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	var cands []string
	for i := 0; i < 3; i++ {
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		rp, err := freePort()
		if err != nil {
			return nil, err
		}
		n := &node{id: fmt.Sprintf("node-%c", 'a'+i), url: fmt.Sprintf("%s://127.0.0.1:%d", scheme, hp), raft: fmt.Sprintf("127.0.0.1:%d", rp)}
		n.dir = filepath.Join(dir, n.id)
		n.config = filepath.Join(n.dir, "elanous.yaml")
		c.nodes = append(c.nodes, n)
		cands = append(cands, fmt.Sprintf("    - { machine: %s, url: %s, raft: %s }", n.id, n.url, n.raft))
	}
	tokens := `{"admin":"` + strings.Repeat("a", 64) + `","member":"` + strings.Repeat("b", 64) + `","query":"` + strings.Repeat("c", 64) + `"}`
	for _, n := range c.nodes {
		if err := os.MkdirAll(filepath.Join(n.dir, "data", "control"), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "data", "control", "tokens.json"), []byte(tokens), 0o600); err != nil {
			return nil, err
		}
		tlsYAML := ""
		if tlsOn {
			tdir := filepath.Join(dir, "tls")
			if out, err := exec.Command(o.bin, "tls", "cert", "--ca-dir", tdir, "--machine", n.id, "--ip", "127.0.0.1", "--out", tdir).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("tls cert: %w\n%s", err, out)
			}
			tlsYAML = fmt.Sprintf("tls: { ca_file: %s, cert_file: %s, key_file: %s }\n", filepath.Join(tdir, "ca.pem"),
				filepath.Join(tdir, n.id+".pem"), filepath.Join(tdir, n.id+"-key.pem"))
		}
		yaml := fmt.Sprintf("node: { id: %s, data_dir: %s }\nhttp: { addr: %q, advertise: %q }\n"+
			"raft: { advertise: %q, heartbeat_timeout: %s, election_timeout: %s, leader_lease_timeout: %s }\n"+
			"cluster:\n  bootstrap: true\n  candidates:\n%s\nlog: { level: warn }\n%s",
			n.id, filepath.Join(n.dir, "data"), strings.SplitN(n.url, "://", 2)[1], n.url, n.raft,
			o.timeout, o.timeout, o.timeout/2, strings.Join(cands, "\n"), tlsYAML)
		if err := os.WriteFile(n.config, []byte(yaml), 0o600); err != nil {
			return nil, err
		}
		if err := c.start(ctx, n); err != nil {
			return nil, err
		}
	}
	if _, _, err := c.agreed(ctx, nil, 0, 30*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cluster) start(ctx context.Context, n *node) error {
	log, err := os.OpenFile(filepath.Join(n.dir, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(c.bin, "serve", "--config", n.config)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	if err := n.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); log.Close(); close(n.done) }()
	return nil
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			<-n.done
		}
	}
}

type primary struct {
	Known      bool   `json:"known"`
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
}

func (c *cluster) primary(n *node) (primary, error) {
	var p primary
	resp, err := c.http.Get(n.url + "/v1/primary")
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	return p, json.NewDecoder(resp.Body).Decode(&p)
}

// agreed waits until every node but skip answers a known primary above gen,
// all the same, and returns it and when the last node first did.
func (c *cluster) agreed(ctx context.Context, skip *node, gen uint64, timeout time.Duration) (primary, time.Time, error) {
	deadline := time.Now().Add(timeout)
	seen := map[string]time.Time{}
	for {
		var agreed *primary
		ok := true
		for _, n := range c.nodes {
			if n == skip {
				continue
			}
			p, err := c.primary(n)
			if err != nil || !p.Known || p.Generation <= gen || (agreed != nil && *agreed != p) {
				ok = false
				delete(seen, n.id)
				continue
			}
			if _, has := seen[n.id]; !has {
				seen[n.id] = time.Now()
			}
			agreed = &p
		}
		if ok && agreed != nil {
			last := time.Time{}
			for _, at := range seen {
				if at.After(last) {
					last = at
				}
			}
			return *agreed, last, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return primary{}, time.Time{}, fmt.Errorf("no agreed primary above generation %d within %s", gen, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killLeader SIGKILLs the leader, measures the gap until both survivors
// serve a new primary, restarts the killed node and waits until all three
// agree again.
func (c *cluster) killLeader(ctx context.Context) (time.Duration, error) {
	p, _, err := c.agreed(ctx, nil, 0, 20*time.Second)
	if err != nil {
		return 0, err
	}
	var leader *node
	for _, n := range c.nodes {
		if n.id == p.Holder {
			leader = n
		}
	}
	killed := time.Now()
	_ = leader.cmd.Process.Kill()
	<-leader.done
	_, last, err := c.agreed(ctx, leader, p.Generation, 20*time.Second)
	if err != nil {
		return 0, err
	}
	gap := last.Sub(killed)
	if err := c.start(ctx, leader); err != nil {
		return 0, err
	}
	if _, _, err := c.agreed(ctx, nil, p.Generation, 30*time.Second); err != nil {
		return 0, err
	}
	time.Sleep(time.Second) // let the restarted node settle before the next kill
	return gap, nil
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func floats(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, ", ")
}

func meanDur(xs []time.Duration) time.Duration {
	var s time.Duration
	for _, x := range xs {
		s += x
	}
	return (s / time.Duration(len(xs))).Round(time.Millisecond)
}

func pct(xs []time.Duration, p int) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(time.Millisecond)
}
