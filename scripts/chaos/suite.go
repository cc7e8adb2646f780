package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/scripts/chaos/harness"
	"github.com/elanous/elanous-node/scripts/chaos/netns"
	"github.com/elanous/elanous-node/scripts/chaos/workload"
)

// options are the command line.
type options struct {
	scenarios []string
	duration  time.Duration
	nodes     int
	report    string
	soak      time.Duration
	keep      bool
	short     bool
	out       string
	bin       string
	seed      uint64
	clients   int
	verbose   bool
	// tls runs every chosen scenario with TLS (docker-partition always
	// does: its containers run deploy/'s configs, which are TLS).
	tls bool
	// electionTimeout is the nodes' raft.election_timeout and
	// heartbeat_timeout (the lease timeout is half of it).
	electionTimeout time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	scen := fs.String("scenario", "all", "scenario name, comma-separated names, or all")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "workload time per scenario (faults take the first three quarters)")
	fs.IntVar(&o.nodes, "nodes", 3, "candidates per cluster: 3 or 5 (partition-halves and partition-bridge always use 5)")
	fs.StringVar(&o.report, "report", "", "write the JSON report to this file")
	fs.DurationVar(&o.soak, "soak", 0, "repeat the chosen scenarios until this much time has passed")
	fs.BoolVar(&o.keep, "keep", false, "keep the output of passing scenarios too")
	fs.BoolVar(&o.short, "short", false, "CI mode: every scenario short enough for the whole suite to fit in 6 minutes")
	fs.StringVar(&o.out, "out", "", "output directory (default: a new directory under the system temp dir)")
	fs.StringVar(&o.bin, "bin", "", "use this elanous-node binary (built with -tags chaos) instead of building one")
	fs.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "workload random seed")
	fs.IntVar(&o.clients, "clients", 9, "concurrent workload clients (at least 8)")
	fs.BoolVar(&o.verbose, "v", false, "print every fault action")
	fs.BoolVar(&o.tls, "tls", false, "run every chosen scenario with TLS: HTTPS API and mutual TLS Raft, certificates from elanous-node tls (--short without it also runs "+strings.Join(tlsShort, " and ")+" with TLS)")
	fs.DurationVar(&o.electionTimeout, "election-timeout", 500*time.Millisecond, "the nodes' raft election and heartbeat timeout (not the docker-partition containers, which use deploy/node-*.yaml)")
	list := fs.Bool("list", false, "list the scenarios and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *list {
		for _, s := range scenarios() {
			fmt.Printf("%-18s %s\n", s.name, s.about)
		}
		return o, flag.ErrHelp
	}
	if o.nodes != 3 && o.nodes != 5 {
		return o, fmt.Errorf("--nodes must be 3 or 5")
	}
	if o.electionTimeout < 100*time.Millisecond {
		return o, fmt.Errorf("--election-timeout must be at least 100ms")
	}
	if o.short && o.duration == 20*time.Second {
		o.duration = 8 * time.Second
	}
	known := map[string]bool{}
	for _, s := range scenarios() {
		known[s.name] = true
	}
	for _, n := range strings.Split(*scen, ",") {
		n = strings.TrimSpace(n)
		if n == "all" {
			o.scenarios = nil
			for _, s := range scenarios() {
				o.scenarios = append(o.scenarios, s.name)
			}
			break
		}
		if !known[n] {
			return o, fmt.Errorf("unknown scenario %q (try --list)", n)
		}
		o.scenarios = append(o.scenarios, n)
	}
	return o, nil
}

// row is one scenario's line of the report.
type row struct {
	Name             string `json:"name"`
	Ops              int    `json:"ops"`
	OK               int    `json:"ok"`
	Failed           int    `json:"failed"`
	Indeterminate    int    `json:"indeterminate"`
	Linearizable     bool   `json:"linearizable"`
	Violations       int    `json:"violations"`
	MaxUnavailableMs int64  `json:"maxUnavailableMs"`
	LeaderChanges    int    `json:"leaderChanges"`
	// Kept out of the report, whose shape is fixed; a failed run writes
	// them to violations.json in its directory.
	Details []check.Violation `json:"-"`
	Error   string            `json:"-"`
	Dir     string            `json:"-"`
	Seconds float64           `json:"-"`
}

type report struct {
	Scenarios []row `json:"scenarios"`
}

type suite struct {
	opt  options
	bin  string
	root string
}

func (s *suite) logf(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (s *suite) run(ctx context.Context) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "chaos: needs root (network namespaces, iptables, mounts)")
		return 2
	}
	if err := netns.EnsureTools(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	unlock, err := lockSuite()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	defer unlock()
	s.root = s.opt.out
	if s.root == "" {
		s.root, err = os.MkdirTemp("", "elanous-chaos-")
	} else {
		err = os.MkdirAll(s.root, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	s.logf("output in %s", s.root)
	if s.bin, err = s.build(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	plan := s.plan()
	var rep report
	deadline := time.Now().Add(s.opt.soak)
	for round := 1; ; round++ {
		for _, sc := range plan {
			if ctx.Err() != nil {
				break
			}
			r := s.runScenario(ctx, sc, round)
			rep.Scenarios = append(rep.Scenarios, r)
			if s.opt.report != "" {
				_ = writeReport(s.opt.report, rep)
			}
		}
		if ctx.Err() != nil || s.opt.soak == 0 || time.Now().After(deadline) {
			break
		}
	}
	printTable(os.Stdout, rep)
	if s.opt.report != "" {
		if err := writeReport(s.opt.report, rep); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	failed := 0
	for _, r := range rep.Scenarios {
		if !passed(r) {
			failed++
		}
	}
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return 130
	}
	if failed > 0 {
		fmt.Printf("%d of %d scenario runs failed; their histories, visualisations and node logs are under %s\n", failed, len(rep.Scenarios), s.root)
		return 1
	}
	fmt.Printf("%d scenario runs passed\n", len(rep.Scenarios))
	if !s.opt.keep {
		_ = os.RemoveAll(s.root)
	}
	return 0
}

// plan lists the runs of one round: the chosen scenarios, with TLS under
// --tls; under --short (without --tls) followed by the tlsShort scenarios
// that were chosen, again with TLS.
func (s *suite) plan() []scenario {
	byName := map[string]scenario{}
	for _, sc := range scenarios() {
		byName[sc.name] = sc
	}
	var out []scenario
	for _, name := range s.opt.scenarios {
		sc := byName[name]
		sc.tls = s.opt.tls && !sc.docker
		out = append(out, sc)
	}
	if s.opt.short && !s.opt.tls {
		for _, name := range tlsShort {
			if slices.Contains(s.opt.scenarios, name) {
				sc := byName[name]
				sc.tls = true
				out = append(out, sc)
			}
		}
	}
	return out
}

func passed(r row) bool { return r.Error == "" && r.Linearizable && r.Violations == 0 }

// lockSuite makes sure one suite runs at a time: they would share names.
func lockSuite() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "elanous-chaos.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, errors.New("another chaos run holds " + f.Name())
	}
	return func() { f.Close() }, nil
}

// productRoot is the product's module directory: the suite's own module
// replaces github.com/elanous/elanous-node with it, so this holds from the
// repository root and from scripts/chaos alike.
func productRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/elanous/elanous-node").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("find the product's module: run from inside the repository (go list -m: %v)", err)
	}
	return dir, nil
}

// build compiles the chaos build of elanous-node (and, for the container
// scenario, a static one; both are the same CGO_ENABLED=0 binary).
func (s *suite) build(ctx context.Context) (string, error) {
	if s.opt.bin != "" {
		return filepath.Abs(s.opt.bin)
	}
	modRoot, err := productRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(s.root, "bin", "elanous-node")
	s.logf("building %s (-tags chaos, CGO_ENABLED=0)", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "chaos", "-trimpath", "-o", bin, "./cmd/elanous-node")
	cmd.Dir = modRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build elanous-node: %w\n%s", err, out)
	}
	return bin, nil
}

func writeReport(path string, rep report) error { return writeJSON(path, rep) }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func printTable(w io.Writer, rep report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSCENARIO\tOPS\tOK\tFAILED\tINDET\tLINEARIZABLE\tVIOLATIONS\tMAX UNAVAIL\tLEADER CHANGES\tTIME\tRESULT")
	for _, r := range rep.Scenarios {
		res := "pass"
		if !passed(r) {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%d\t%dms\t%d\t%.0fs\t%s\n", r.Name, r.Ops, r.OK, r.Failed, r.Indeterminate,
			r.Linearizable, r.Violations, r.MaxUnavailableMs, r.LeaderChanges, r.Seconds, res)
	}
	tw.Flush()
	for _, r := range rep.Scenarios {
		if passed(r) {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", r.Name)
		if r.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", r.Error)
		}
		for i, v := range r.Details {
			if i == 20 {
				fmt.Fprintf(w, "  … %d more\n", len(r.Details)-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
		if r.Dir != "" {
			fmt.Fprintf(w, "  kept: %s\n", r.Dir)
		}
	}
}

// stats fills a row's counts from a history; the window is the workload's.
func stats(r *row, h []check.Op, from, to int64) {
	var oks []int64
	for _, o := range h {
		r.Ops++
		switch o.Outcome {
		case check.OK:
			r.OK++
			if o.Kind.IsWrite() {
				oks = append(oks, o.Return)
			}
		case check.Failed:
			r.Failed++
		case check.Indeterminate:
			r.Indeterminate++
		}
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i] < oks[j] })
	prev := from
	var gap int64
	for _, t := range oks {
		if t > to {
			break
		}
		gap = max(gap, t-prev)
		prev = max(prev, t)
	}
	gap = max(gap, to-prev)
	r.MaxUnavailableMs = gap / int64(time.Millisecond)
}

// saveHistory writes the history as JSON lines for a failed run.
func saveHistory(path string, h []check.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, o := range h {
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	return nil
}

// targets lists the nodes for the workload.
func targets(c *harness.Cluster) []workload.Target {
	var ts []workload.Target
	for _, n := range c.Nodes {
		ts = append(ts, workload.Target{Name: n.Name, URL: n.URL, Epoch: n.Epoch})
	}
	return ts
}
