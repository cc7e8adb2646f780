package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Row ids, in the order they run and print.
const (
	rowWrite    = "write"
	rowLock     = "lock"
	rowRenewal  = "renewal"
	rowLoad     = "load"
	rowOpen     = "open"
	rowSingle   = "single"
	rowFailover = "failover"
)

// defaultRows are the rows run when --ops is not given: every row but open,
// which needs a population (--fill or --open-members).
var defaultRows = []string{rowWrite, rowLock, rowRenewal, rowLoad, rowSingle, rowFailover}

// rowAliases are row names --ops accepts for another row.
var rowAliases = map[string]string{"keepalive": rowRenewal}

// rowSpec describes one row of the comparison.
type rowSpec struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Etcd    string `json:"etcd"`
	Elanous string `json:"elanous"`
	// Unit is what ops/s counts: "writes" or "ops"; "open" for an open
	// loop, "gap" for the failover row.
	Unit string `json:"unit"`
}

var rowSpecs = []rowSpec{
	{rowWrite, "one write, c=%d", "Put of one key per client", "POST /v1/resources/register of one resource per client (upsert)", "writes"},
	{rowLock, "two writes, c=%d", "Txn if create_revision=0 put, then Txn if value=mine delete", "POST /v1/leases/port, then DELETE /v1/leases/port/{port}", "writes"},
	{rowRenewal, "renewal, c=%d", "KeepAliveOnce on a granted lease (60 s)", "POST /v1/resources/{id}/heartbeat with {} on a registered resource (600 s TTL: covered after the first beat)", "ops"},
	{rowLoad, "load heartbeat, c=%d", "Put of the member's load under a key attached to a granted lease", "POST /v1/resources/{id}/heartbeat with a new load attr on every beat (a write)", "writes"},
	{rowOpen, "open loop at the seed's cadence", "Put with a lease for a load, KeepAliveOnce for a renewal", "load heartbeats, instance heartbeats {} and port-lease renewals, as members send them", "open"},
	{rowSingle, "one client, one write at a time, to the leader", "Put", "POST /v1/resources/register", "writes"},
	{rowFailover, "leader SIGKILL → next successful write, c=1", "Put through a surviving follower", "register through a surviving candidate", "gap"},
}

// options are the command line.
type options struct {
	duration time.Duration
	clients  int
	kills    int
	only     string
	ops      []string
	fill     int
	// fillShape is what the fill's records look like (--fill-shape).
	fillShape fillShape
	// backups is how many snapshot saves the scale phase takes (--backups).
	backups int
	json    bool
	repo    string
	etcd34  string
	workDir string

	// The elanous-only measurements (see usageText).
	scale             bool
	leases            int
	rate              float64
	rateDuration      time.Duration
	openClients       int
	snapshotWait      time.Duration
	sampleEvery       time.Duration
	watches           int
	watchesPerAddress int
	watchHold         time.Duration
	soak              time.Duration
	calm              time.Duration
	calmFraction      float64
	calmRate          float64
	ceiling           bool

	// The open row (--ops open).
	openMembers int
	openLeases  int
	openRate    float64
}

// elanousModes reports whether an elanous-only measurement other than the
// scale phase was asked for.
func (o options) elanousModes() bool { return o.soak > 0 || o.calm > 0 || o.watches > 0 }

const usageText = `Usage: scripts/bench/compare-etcd [flags]

Runs a three-member etcd cluster (3.4 from Debian's etcd-server, 3.6 built from
the Go module proxy) and then a three-candidate elanous-node cluster (built from
this working tree) on loopback, drives each with the same client shapes, and
prints one table: ops/s, p50 and p99 per row for each system and the ratio
elanous / best etcd. Progress goes to stderr, the table (or --json) to stdout.

Rows (--ops):
  write      etcd Put vs elanous register (one write each), --clients clients
  lock       etcd Txn compare-and-put + Txn compare-and-delete vs elanous lease
             acquire + release (two writes each; writes/s)
  renewal    etcd KeepAliveOnce on a granted lease vs elanous heartbeat {} on
             a registered resource (600 s TTL: after the first beat its
             replicated expiry covers the renewal, so no log entry); also
             accepted as keepalive
  load       etcd Put of a new load under a key attached to a granted lease vs
             elanous heartbeat whose load attr changes on every beat (a write)
  open       not by default: an open loop at the seed member's cadence over a
             population of members (--fill N gives N/2 members, a machine and
             an instance record each; --open-members M registers its own):
             every 30 s a member heartbeats its machine with a new load,
             renews each of its --open-leases port leases, and every 300 s
             heartbeats its instance with {}; offered at that cadence's rate
             (or --open-rate) for --rate-duration; achieved rate, p50, p99,
             and on elanous each node's RSS and peak RSS meanwhile
  single     one client, one write at a time, to the leader (Put vs register)
  failover   SIGKILL the leader under a one-client write loop through a
             surviving member; the gap from the kill to the next successful
             write, --kills times (median and max)

Measurements of the elanous cluster alone (each optional; the scale phase runs
right after the fill, before the rows, the others after the rows, in this
order):
  --fill N   before the rows, N resources are registered (and N keys put in
             etcd); then, unless --scale=false, the scale phase measures on
             elanous: the heartbeat row's shape on the empty state (before the
             fill) and at N; RSS per node with N resources and --leases port
             leases held; an open loop of --rate heartbeats/s for
             --rate-duration over the N resources (achieved rate, p50, p99);
             --backups snapshot saves from the leader (time and size);
             the snapshots taken with N resources (from raft's log lines,
             waiting up to --snapshot-wait for one on every node); and how long
             a follower takes to serve /v1/ready after SIGTERM and a restart.
             --fill-shape machine fills with a seed member's machine records
             (duties and load attrs) and publishes a new load on each beat
  --watches N  N members each hold a blocking GET /v1/primary?index=<current>
             &wait=5m on every candidate (N per candidate, --watches-per-address
             from each loopback source address 127.1.x.y; one holder process
             per candidate) for --watch-hold;
             each candidate's RSS, and how many were held, refused (429) or
             failed
  --soak D   the renewal row's shape for D; every node's RSS and raft.db size
             sampled every --sample-every (highest of each, and the kernel's
             peak RSS), the rate, p50, p99 and the snapshots taken
  --calm D   an open loop at --calm-fraction of the renewal row's peak for D
             (the peak is measured first when the renewal row did not run);
             the leader changes each node counted

The HTTP ceiling (--ceiling, after the systems): three processes of this
driver on loopback, one answering every request at once and two forwarding
each to it, carry the register row's requests with no work behind them,
--clients clients for --duration: all on the answering process, then spread
as the rows spread them. No API over per-request HTTP/1.1 passes the spread
figure on this machine; each elanous row is given as a fraction of it.

With --watches, --soak or --calm and no --ops, no row runs (and etcd is not
started). RSS is VmRSS from /proc; the peak is VmHWM, reset at each phase's
start.

ELANOUS_* variables in the environment reach the elanous nodes (the environment
overrides their config file), except those naming a node's identity, addresses,
candidates or tokens file, which the benchmark sets.

Flags:
`

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	var ops string
	fs := flag.NewFlagSet("compare-etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "how long each throughput row runs")
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients of the write, lock and renewal rows, spread over the three members (at most 50: the lock row holds one port of the 50-port test band per client)")
	fs.IntVar(&o.kills, "kills", 5, "leader kills in the failover row")
	fs.StringVar(&o.only, "only", "", "run only one side: elanous or etcd")
	fs.StringVar(&ops, "ops", strings.Join(defaultRows, ","), "comma-separated rows to run (keepalive is another name for renewal; open needs --fill or --open-members)")
	fs.IntVar(&o.fill, "fill", 0, "before measuring, register this many resources (24 h TTL) in the elanous cluster and put as many keys in etcd")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&o.repo, "repo", "", "the elanous-node working tree to build (default: found from the current directory)")
	fs.StringVar(&o.etcd34, "etcd34", "/usr/bin/etcd", "the etcd 3.4 binary (Debian's etcd-server is installed when it is missing)")
	fs.StringVar(&o.workDir, "work-dir", "", "parent of the run's temporary directory (default: the system temp dir)")
	fs.StringVar((*string)(&o.fillShape), "fill-shape", shapeInstance, "what the fill registers: instance (ten instances a machine, no attrs) or machine (one machine record each with a seed member's duties and load attrs, about 150 bytes; the scale phase's open loop then publishes a new load on every heartbeat)")
	fs.IntVar(&o.backups, "backups", 0, "scale phase: after the open loop, take this many snapshot saves (GET /v1/snapshot, admin) from the leader while the footprint is sampled")
	fs.BoolVar(&o.scale, "scale", true, "with --fill, run the scale phase on elanous")
	fs.IntVar(&o.leases, "leases", 50, "scale phase: port leases held, one machine each")
	fs.Float64Var(&o.rate, "rate", 3400, "scale phase: heartbeats/s offered by the open loop")
	fs.DurationVar(&o.rateDuration, "rate-duration", 60*time.Second, "scale phase: how long the open loop runs")
	fs.IntVar(&o.openClients, "open-clients", 64, "open loops (scale phase, --calm): connections, spread over the three candidates")
	fs.DurationVar(&o.snapshotWait, "snapshot-wait", 4*time.Minute, "scale phase: how long to wait for a snapshot on every node after the open loop")
	fs.DurationVar(&o.sampleEvery, "sample-every", 2*time.Second, "how often the footprint of every node is sampled during the elanous-only measurements")
	fs.IntVar(&o.watches, "watches", 0, "blocking /v1/primary watches held on each candidate (0: none)")
	fs.IntVar(&o.watchesPerAddress, "watches-per-address", 32, "watches on each candidate from one source address")
	fs.DurationVar(&o.watchHold, "watch-hold", 15*time.Second, "how long the watches are held once open")
	fs.DurationVar(&o.soak, "soak", 0, "soak: the renewal row's shape for this long (0: none)")
	fs.IntVar(&o.openMembers, "open-members", 0, "open row: members at the seed's cadence, each registering a machine and an instance record of its own (0: half the --fill records, a machine and an instance record each)")
	fs.IntVar(&o.openLeases, "open-leases", 1, "open row: port leases each member renews every 30 s (the row holds at most --leases leases and spreads the renewals over them)")
	fs.Float64Var(&o.openRate, "open-rate", 0, "open row: requests/s offered (0: the members' cadence)")
	fs.BoolVar(&o.ceiling, "ceiling", false, "after the systems, measure the bare HTTP/1.1 ceiling in the rows' client shape")
	fs.DurationVar(&o.calm, "calm", 0, "calm run: an open loop at --calm-fraction of the peak for this long, counting leader changes (0: none)")
	fs.Float64Var(&o.calmFraction, "calm-fraction", 0.8, "calm run: the fraction of the renewal row's peak offered")
	fs.Float64Var(&o.calmRate, "calm-rate", 0, "calm run: offer this many heartbeats/s instead of a fraction of the peak")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	opsSet := false
	fs.Visit(func(f *flag.Flag) { opsSet = opsSet || f.Name == "ops" })
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if o.duration <= 0 {
		errs = append(errs, errors.New("--duration must be positive"))
	}
	if o.clients < 1 || o.clients > 50 {
		errs = append(errs, errors.New("--clients must be between 1 and 50"))
	}
	if o.kills < 1 {
		errs = append(errs, errors.New("--kills must be at least 1"))
	}
	if o.fill < 0 {
		errs = append(errs, errors.New("--fill must not be negative"))
	}
	if !o.fillShape.valid() {
		errs = append(errs, fmt.Errorf("--fill-shape %q: want %s or %s", o.fillShape, shapeInstance, shapeMachine))
	}
	if o.backups < 0 {
		errs = append(errs, errors.New("--backups must not be negative"))
	}
	switch o.only {
	case "", "elanous", "etcd":
	default:
		errs = append(errs, fmt.Errorf("--only %q: want elanous or etcd", o.only))
	}
	for _, op := range strings.Split(ops, ",") {
		op = strings.TrimSpace(op)
		if op == "" {
			continue
		}
		if to, ok := rowAliases[op]; ok {
			op = to
		}
		if !slices.ContainsFunc(rowSpecs, func(r rowSpec) bool { return r.ID == op }) {
			errs = append(errs, fmt.Errorf("--ops: unknown row %q (want %s)", op, rowIDs()))
			continue
		}
		if !slices.Contains(o.ops, op) {
			o.ops = append(o.ops, op)
		}
	}
	if o.leases < 0 {
		errs = append(errs, errors.New("--leases must not be negative"))
	}
	if o.rate <= 0 || o.rateDuration <= 0 {
		errs = append(errs, errors.New("--rate and --rate-duration must be positive"))
	}
	if o.openClients < 1 || o.openClients > 1000 {
		errs = append(errs, errors.New("--open-clients must be between 1 and 1000"))
	}
	if o.snapshotWait < 0 {
		errs = append(errs, errors.New("--snapshot-wait must not be negative"))
	}
	if o.sampleEvery <= 0 {
		errs = append(errs, errors.New("--sample-every must be positive"))
	}
	if o.watches < 0 {
		errs = append(errs, errors.New("--watches must not be negative"))
	}
	if o.watchesPerAddress < 1 {
		errs = append(errs, errors.New("--watches-per-address must be at least 1"))
	} else if (o.watches+o.watchesPerAddress-1)/o.watchesPerAddress > maxWatchAddrs {
		errs = append(errs, fmt.Errorf("--watches %d needs more than %d source addresses at --watches-per-address %d", o.watches, maxWatchAddrs, o.watchesPerAddress))
	}
	if o.watchHold <= 0 {
		errs = append(errs, errors.New("--watch-hold must be positive"))
	}
	if o.soak < 0 || o.calm < 0 {
		errs = append(errs, errors.New("--soak and --calm must not be negative"))
	}
	if o.calmFraction <= 0 || o.calmFraction > 1 {
		errs = append(errs, errors.New("--calm-fraction must be in (0, 1]"))
	}
	if o.calmRate < 0 {
		errs = append(errs, errors.New("--calm-rate must not be negative"))
	}
	if o.openMembers < 0 || o.openLeases < 0 || o.openRate < 0 {
		errs = append(errs, errors.New("--open-members, --open-leases and --open-rate must not be negative"))
	}
	if slices.Contains(o.ops, rowOpen) && o.openMembers == 0 && o.fill < 2 {
		errs = append(errs, errors.New("--ops open needs a population: --fill of at least 2 records or --open-members"))
	}
	if o.only == "etcd" && o.elanousModes() {
		errs = append(errs, errors.New("--watches, --soak and --calm measure elanous: not with --only etcd"))
	}
	if !opsSet && o.elanousModes() {
		o.ops = nil // only the measurements asked for
	}
	if len(o.ops) == 0 && !o.elanousModes() && len(errs) == 0 {
		errs = append(errs, errors.New("--ops names no row"))
	}
	if o.only != "etcd" && o.repo == "" {
		repo, err := findRepo()
		if err != nil {
			errs = append(errs, err)
		}
		o.repo = repo
	}
	return o, errors.Join(errs...)
}

func rowIDs() string {
	var ids []string
	for _, r := range rowSpecs {
		ids = append(ids, r.ID)
	}
	return strings.Join(ids, ", ")
}

// findRepo walks up from the current directory to the go.mod of module
// github.com/elanous/elanous-node.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/elanous/elanous-node\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the elanous-node working tree above the current directory; pass --repo")
		}
		dir = parent
	}
}

// system is one cluster under test: etcd of one version, or elanous.
type system interface {
	// Name is the column heading: "etcd 3.4", "etcd 3.6", "elanous".
	Name() string
	// Version is the full version of the server binary.
	Version() string
	// Start brings up three members on loopback and waits until they serve.
	Start(ctx context.Context) error
	// Stop kills every process of the cluster.
	Stop()
	// Fill writes n records with concurrency clients.
	Fill(ctx context.Context, shape fillShape, n, clients int, progress func(done int)) error
	// Workers prepares the clients of a throughput row: each step is one
	// write or renewal. single puts one client on the leader.
	Workers(ctx context.Context, row string, clients int) ([]step, func(), error)
	// Leader returns the index of the leading member.
	Leader(ctx context.Context) (int, error)
	// Writer prepares a one-client write loop through member i whose every
	// attempt has its own deadline.
	Writer(ctx context.Context, i int) (step, func(), error)
	// Kill sends SIGKILL to member i and waits for it to exit.
	Kill(i int) error
	// Restart starts member i again on its data dir.
	Restart(ctx context.Context, i int) error
	// WaitHealthy waits until all three members serve with one leader.
	WaitHealthy(ctx context.Context) error
	// Usage reports each member's RSS and on-disk size.
	Usage() []nodeUsage
	// Logs returns the members' log files, for a failure report.
	Logs() []string
}

// report is the whole run, as --json prints it.
type report struct {
	Started        time.Time        `json:"started"`
	RuntimeSeconds float64          `json:"runtimeSeconds"`
	Host           hostInfo         `json:"host"`
	Options        reportOptions    `json:"options"`
	Systems        []systemInfo     `json:"systems"`
	Rows           []rowReport      `json:"rows"`
	Usage          []nodeUsage      `json:"usage"`
	Fill           map[string]stats `json:"fill,omitempty"`
	// The elanous-only measurements, when asked for.
	Scale   *scaleReport `json:"scale,omitempty"`
	Watches *watchReport `json:"watches,omitempty"`
	Soak    *soakReport  `json:"soak,omitempty"`
	Calm    *calmReport  `json:"calm,omitempty"`
	// OpenRow is the open row's setup and elanous footprint, when it ran.
	OpenRow *openRowReport `json:"openRow,omitempty"`
	// Ceiling is the bare HTTP/1.1 ceiling, when asked for (--ceiling).
	Ceiling *ceilingReport `json:"ceiling,omitempty"`
	// Targets sets the figures measured beside the bounds the project holds
	// them to.
	Targets []target `json:"targets,omitempty"`
}

type reportOptions struct {
	DurationSeconds float64  `json:"durationSeconds"`
	Clients         int      `json:"clients"`
	Kills           int      `json:"kills"`
	Fill            int      `json:"fill"`
	Ops             []string `json:"ops"`
	ElanousEnv      []string `json:"elanousEnv,omitempty"`

	Scale               bool    `json:"scale,omitempty"`
	Leases              int     `json:"leases,omitempty"`
	Rate                float64 `json:"rate,omitempty"`
	RateSeconds         float64 `json:"rateSeconds,omitempty"`
	OpenClients         int     `json:"openClients,omitempty"`
	Watches             int     `json:"watches,omitempty"`
	WatchesPerAddress   int     `json:"watchesPerAddress,omitempty"`
	SoakSeconds         float64 `json:"soakSeconds,omitempty"`
	CalmSeconds         float64 `json:"calmSeconds,omitempty"`
	CalmFraction        float64 `json:"calmFraction,omitempty"`
	SampleEverySeconds  float64 `json:"sampleEverySeconds"`
	SnapshotWaitSeconds float64 `json:"snapshotWaitSeconds,omitempty"`
}

type hostInfo struct {
	CPUs         int    `json:"cpus"`
	GoVersion    string `json:"goVersion"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
	ElanousRev   string `json:"elanousRevision,omitempty"`
}

type systemInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// rowReport is one row: each system's figures and the ratio.
type rowReport struct {
	rowSpec
	Results map[string]*stats `json:"results"`
	// BestEtcd names the etcd column the ratio is taken against.
	BestEtcd string `json:"bestEtcd,omitempty"`
	// Ratio is elanous / best etcd: of ops/s for throughput rows (higher is
	// better for elanous), of the median gap for failover and of the p99 for
	// the open row (lower is better; the best etcd is the lower one).
	Ratio float64 `json:"ratio,omitempty"`
	// P50Ratio is elanous p50 / the lower etcd p50 on the single row.
	P50Ratio float64 `json:"p50Ratio,omitempty"`
}

func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args, os.Stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	rep := &report{
		Started: started,
		Host:    hostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()},
		Options: reportOptions{DurationSeconds: o.duration.Seconds(), Clients: o.clients, Kills: o.kills, Fill: o.fill, Ops: o.ops,
			SoakSeconds: o.soak.Seconds(), CalmSeconds: o.calm.Seconds(), Watches: o.watches, SampleEverySeconds: o.sampleEvery.Seconds()},
	}
	if o.fill > 0 && o.scale && o.only != "etcd" {
		ro := &rep.Options
		ro.Scale, ro.Leases, ro.Rate, ro.RateSeconds, ro.SnapshotWaitSeconds = true, o.leases, o.rate, o.rateDuration.Seconds(), o.snapshotWait.Seconds()
	}
	if o.watches > 0 {
		rep.Options.WatchesPerAddress = o.watchesPerAddress
	}
	if o.calm > 0 || (o.fill > 0 && o.scale) || slices.Contains(o.ops, rowOpen) {
		rep.Options.OpenClients = o.openClients
	}
	if slices.Contains(o.ops, rowOpen) {
		rep.Options.RateSeconds = o.rateDuration.Seconds()
	}
	if o.calm > 0 {
		rep.Options.CalmFraction = o.calmFraction
	}
	pr := newPrinter(os.Stderr)
	procs := newProcs()
	defer procs.killAll()

	root, err := os.MkdirTemp(o.workDir, "elanous-compare-etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	if o.watches > 0 {
		// Before any node starts, so that they inherit it too.
		limit, err := raiseFileLimit(uint64(o.watches + 4096))
		if err != nil {
			pr.logf("%v", err)
		}
		pr.logf("open-file limit %d", limit)
	}

	var systems []system
	if o.only != "elanous" && len(o.ops) > 0 {
		pr.logf("preparing etcd 3.4 (Debian etcd-server) and etcd %s (built from the Go module proxy)", etcd36Version)
		bin34, err := ensureEtcd34(ctx, o.etcd34, pr)
		if err != nil {
			return err
		}
		bin36, err := ensureEtcd36(ctx, pr)
		if err != nil {
			return err
		}
		for _, b := range []struct{ name, bin string }{{"etcd 3.4", bin34}, {"etcd 3.6", bin36}} {
			s, err := newEtcdSystem(b.name, b.bin, filepath.Join(root, strings.ReplaceAll(b.name, " ", "-")), procs)
			if err != nil {
				return err
			}
			systems = append(systems, s)
		}
	}
	if o.only != "etcd" {
		pr.logf("building elanous-node from %s", o.repo)
		s, err := newElanousSystem(ctx, o.repo, filepath.Join(root, "elanous"), procs)
		if err != nil {
			return err
		}
		rep.Host.ElanousRev = gitRevision(o.repo)
		rep.Options.ElanousEnv = s.passedEnv()
		systems = append(systems, s)
	}

	for _, spec := range rowSpecs {
		if slices.Contains(o.ops, spec.ID) {
			rr := rowReport{rowSpec: spec, Results: map[string]*stats{}}
			if strings.Contains(rr.Title, "%d") {
				rr.Title = fmt.Sprintf(rr.Title, o.clients)
			}
			rep.Rows = append(rep.Rows, rr)
		}
	}
	for _, s := range systems {
		rep.Systems = append(rep.Systems, systemInfo{Name: s.Name(), Version: s.Version()})
		if err := measureSystem(ctx, s, o, rep, pr); err != nil {
			s.Stop()
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", ctx.Err())
			}
			pr.logf("%s failed: %v", s.Name(), err)
			for _, l := range s.Logs() {
				pr.tail(l, 15)
			}
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		s.Stop()
	}
	if o.ceiling {
		if rep.Ceiling, err = runCeiling(ctx, o, root, procs, pr); err != nil {
			return err
		}
	}
	rep.Host.LoadAvgEnd = loadAvg()
	rep.RuntimeSeconds = time.Since(started).Seconds()
	computeRatios(rep)
	ceilingFractions(rep)
	rep.Targets = targets(rep)
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTable(os.Stdout, rep)
	return nil
}

// measureSystem starts s, fills it, runs every selected row and, on
// elanous, the elanous-only measurements asked for, and records its usage
// before stopping it.
func measureSystem(ctx context.Context, s system, o options, rep *report, pr *printer) error {
	pr.logf("%s: starting three members on loopback", s.Name())
	if err := s.Start(ctx); err != nil {
		return err
	}
	es, isElanous := s.(*elanousSystem)
	scale := isElanous && o.fill > 0 && o.scale
	var empty *stats
	if scale {
		pr.logf("elanous: scale: the heartbeat row's shape on the empty state, before the fill")
		var err error
		if empty, err = runRow(ctx, s, rowRenewal, o.clients, o.duration, pr); err != nil {
			return fmt.Errorf("heartbeat on the empty state: %w", err)
		}
	}
	if o.fill > 0 {
		pr.logf("%s: filling %d records with %d clients", s.Name(), o.fill, o.clients)
		t0 := time.Now()
		last := time.Now()
		err := s.Fill(ctx, o.fillShape, o.fill, o.clients, func(done int) {
			if time.Since(last) >= time.Second {
				last = time.Now()
				pr.logf("%s: fill %d/%d (%.0f/s)", s.Name(), done, o.fill, float64(done)/time.Since(t0).Seconds())
			}
		})
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		el := time.Since(t0).Seconds()
		pr.logf("%s: filled %d records in %.1fs (%.0f/s)", s.Name(), o.fill, el, float64(o.fill)/el)
		if rep.Fill == nil {
			rep.Fill = map[string]stats{}
		}
		rep.Fill[s.Name()] = stats{Ops: o.fill, Seconds: el, OpsPerSec: float64(o.fill) / el}
	}
	if scale {
		var err error
		if rep.Scale, err = runScale(ctx, es, o, empty, time.Now(), pr); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}
	var beforeKills []nodeUsage
	for i := range rep.Rows {
		row := &rep.Rows[i]
		var st *stats
		var err error
		switch row.ID {
		case rowFailover:
			beforeKills = s.Usage()
			st, err = runFailover(ctx, s, o.kills, pr)
		case rowOpen:
			rr := &openRowReport{}
			if st, err = runOpenRow(ctx, s, o, rr, pr); err == nil && isElanous {
				rep.OpenRow = rr
			}
		default:
			clients := o.clients
			if row.ID == rowSingle {
				clients = 1
			}
			st, err = runRow(ctx, s, row.ID, clients, o.duration, pr)
		}
		if err != nil {
			return fmt.Errorf("row %s: %w", row.ID, err)
		}
		row.Results[s.Name()] = st
	}
	if isElanous {
		if err := measureElanous(ctx, es, o, rep, pr); err != nil {
			return err
		}
	}
	u := s.Usage()
	for i := range beforeKills {
		u[i].RSSBeforeKillsBytes = beforeKills[i].RSSBytes
	}
	for _, n := range u {
		pr.logf("%s: %s pid %d RSS %s, %s %s", s.Name(), n.Node, n.PID, mib(n.RSSBytes), n.DBName, mib(n.DBBytes))
	}
	rep.Usage = append(rep.Usage, u...)
	return nil
}

// measureElanous runs the elanous-only measurements asked for, after the
// rows: the watches, the soak, the calm run.
func measureElanous(ctx context.Context, s *elanousSystem, o options, rep *report, pr *printer) error {
	var err error
	if o.watches > 0 {
		if rep.Watches, err = runWatches(ctx, s, o, pr); err != nil {
			return fmt.Errorf("watches: %w", err)
		}
		if err := s.WaitHealthy(ctx); err != nil {
			return fmt.Errorf("after the watches: %w", err)
		}
	}
	if o.soak > 0 {
		if rep.Soak, err = runSoak(ctx, s, o, pr); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	if o.calm > 0 {
		var peak float64
		for _, row := range rep.Rows {
			if st := row.Results[s.Name()]; row.ID == rowRenewal && st != nil {
				peak = st.OpsPerSec
			}
		}
		if rep.Calm, err = runCalm(ctx, s, o, peak, pr); err != nil {
			return fmt.Errorf("calm: %w", err)
		}
	}
	return nil
}

// runRow runs one throughput row against s.
func runRow(ctx context.Context, s system, row string, clients int, d time.Duration, pr *printer) (*stats, error) {
	pr.logf("%s: %s: preparing %d clients", s.Name(), row, clients)
	steps, cleanup, err := s.Workers(ctx, row, clients)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	members := s.Usage()
	cpu0, cpuOK := membersCPUms(members)
	st := runLoad(ctx, steps, d, func(elapsed time.Duration, ops, errs int64) {
		pr.logf("%s: %s: %4.1fs %7d ops %5d errors", s.Name(), row, elapsed.Seconds(), ops, errs)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if cpu1, ok := membersCPUms(members); cpuOK && ok && st.Ops > 0 {
		st.CPUMsPerKOp = (cpu1 - cpu0) * 1000 / float64(st.Ops)
	}
	pr.logf("%s: %s: %s", s.Name(), row, st.summary())
	if st.Ops == 0 {
		return nil, fmt.Errorf("no operation succeeded (%d errors: %s)", st.Errors, st.errorText())
	}
	return st, nil
}

// computeRatios fills each row's best etcd and elanous / best etcd.
func computeRatios(rep *report) {
	for i := range rep.Rows {
		row := &rep.Rows[i]
		el := row.Results["elanous"]
		var best *stats
		for _, name := range []string{"etcd 3.4", "etcd 3.6"} {
			st := row.Results[name]
			if st == nil {
				continue
			}
			if best == nil || (row.ID == rowFailover && st.GapMedianMs < best.GapMedianMs) ||
				(row.ID == rowOpen && st.P99Ms < best.P99Ms) ||
				(row.ID != rowFailover && row.ID != rowOpen && st.OpsPerSec > best.OpsPerSec) {
				best, row.BestEtcd = st, name
			}
		}
		if el == nil || best == nil {
			continue
		}
		if row.ID == rowFailover {
			if best.GapMedianMs > 0 {
				row.Ratio = el.GapMedianMs / best.GapMedianMs
			}
			continue
		}
		if row.ID == rowOpen {
			// Both sides are offered the same rate: the p99 is what
			// differs (lower is better).
			if best.P99Ms > 0 {
				row.Ratio = el.P99Ms / best.P99Ms
			}
			continue
		}
		if best.OpsPerSec > 0 {
			row.Ratio = el.OpsPerSec / best.OpsPerSec
		}
		if row.ID == rowSingle {
			// The p50 is compared with the lower etcd p50, whichever
			// version had the higher rate.
			var bestP50 float64
			for _, name := range []string{"etcd 3.4", "etcd 3.6"} {
				if st := row.Results[name]; st != nil && st.P50Ms > 0 && (bestP50 == 0 || st.P50Ms < bestP50) {
					bestP50 = st.P50Ms
				}
			}
			if bestP50 > 0 {
				row.P50Ratio = el.P50Ms / bestP50
			}
		}
	}
}
