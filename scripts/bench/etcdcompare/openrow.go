package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// The seed member's cadence (member/heartbeat.go and member/portlease.go):
// every interval it heartbeats its machine with a new load and renews each
// of its port leases; every refresh-th interval it also heartbeats its
// instance with no attrs. Its records and leases carry a 600 s TTL.
const (
	seedInterval     = 30 * time.Second
	seedRefreshBeats = 10 // the instance heartbeat: every 10th interval, 300 s
	seedTTLMs        = 600_000
)

// eventKind is what one request of the open row does.
type eventKind int

const (
	// eventLoad heartbeats a member's machine with a new load: a write.
	eventLoad eventKind = iota
	// eventInstance heartbeats a member's instance with {}: a renewal.
	eventInstance
	// eventLease renews one of a member's port leases: a renewal.
	eventLease
)

func (k eventKind) String() string {
	return [...]string{"load heartbeat", "instance heartbeat", "lease renewal"}[k]
}

// cadence is the seed's request stream from members members with leases
// port leases each.
type cadence struct {
	members, leases int
}

// perCycle is how many requests a member sends per refresh cycle (300 s).
func (c cadence) perCycle() int { return seedRefreshBeats*(1+c.leases) + 1 }

// rate is the requests/s all the members send.
func (c cadence) rate() float64 {
	return float64(c.members) * float64(c.perCycle()) / (seedRefreshBeats * seedInterval).Seconds()
}

// openEvent is request k of the stream: its kind, its member, and for a
// lease renewal which of the member's leases.
type openEvent struct {
	kind          eventKind
	member, lease int
}

// event is request k. Request k is member k mod members's; each member's
// requests walk its cycle from an offset of its own, so that neighbouring
// requests are of different kinds and the mix holds over any stretch.
func (c cadence) event(k int) openEvent {
	m := k % c.members
	e := (k/c.members + m) % c.perCycle()
	switch {
	case e < seedRefreshBeats:
		return openEvent{kind: eventLoad, member: m}
	case e == seedRefreshBeats:
		return openEvent{kind: eventInstance, member: m}
	}
	return openEvent{kind: eventLease, member: m, lease: (e - seedRefreshBeats - 1) % c.leases}
}

// openRowReport is the open row's setup and, on elanous, each node's
// footprint while it ran.
type openRowReport struct {
	Members  int `json:"members"`
	Leases   int `json:"leasesPerMember"`
	PerCycle int `json:"requestsPerMemberPer300s"`
	// CadencePerSec is the members' rate at the cadence; the row offers it
	// unless --open-rate says otherwise.
	CadencePerSec float64 `json:"cadencePerSec"`
	// Mix counts the requests due within the run by kind.
	Mix map[string]int `json:"mix"`
	// Records says whose records the members heartbeat: "fill" or "own".
	Records string `json:"records"`
	// HeldLeases is how many port leases the elanous run held and spread
	// the lease renewals over.
	HeldLeases int `json:"heldLeases"`
	// Primed is how many instances and leases elanous renewed once before
	// the clock (every one the run renews, see primeOpen), in PrimeSeconds.
	Primed       int             `json:"primed"`
	PrimeSeconds float64         `json:"primeSeconds"`
	Peaks        []nodePeak      `json:"peaks,omitempty"`
	Snapshots    []nodeSnapshots `json:"snapshots,omitempty"`
}

// openCadence is the open row's cadence from the options.
func openCadence(o options) cadence {
	members := o.openMembers
	if members == 0 {
		members = o.fill / 2
	}
	return cadence{members: members, leases: o.openLeases}
}

// openRate is the rate the open row offers.
func openRate(o options) float64 {
	if o.openRate > 0 {
		return o.openRate
	}
	return openCadence(o).rate()
}

// mixOf counts the kinds of requests 0..total-1.
func (c cadence) mixOf(total int) map[string]int {
	out := map[string]int{}
	for k := range total {
		out[c.event(k).kind.String()]++
	}
	return out
}

// openMembersPop names the records of the open row's members: the fill's
// records, two a member (machine 2m, instance 2m+1), or its own.
type openMembersPop struct {
	own   bool
	shape fillShape
}

func (p openMembersPop) machineID(m int) string {
	if p.own {
		return "machine:open-" + strconv.Itoa(m)
	}
	return p.shape.id(2 * m)
}

func (p openMembersPop) instanceID(m int) string {
	if p.own {
		return "instance:open-" + strconv.Itoa(m) + "/0"
	}
	return p.shape.id(2*m + 1)
}

// loadBeat is the body of a machine heartbeat publishing beat k's load.
func loadBeat(m, k int) []byte {
	return []byte(`{"attrs":{"load":` + string(seedLoad(m, k)) + `}}`)
}

// ownRegister is the register request of the row's own record r: member
// r/2's machine (r even, with its load) or instance (r odd).
func (p openMembersPop) ownRegister(r int) []byte {
	m := r / 2
	req := wire.RegisterRequest{ID: p.instanceID(m), Kind: "instance", Name: p.instanceID(m), Machine: "open-" + strconv.Itoa(m),
		Endpoint: "http://open-" + strconv.Itoa(m) + ".invalid:8080", TTLMs: seedTTLMs}
	if r%2 == 0 {
		req = wire.RegisterRequest{ID: p.machineID(m), Kind: "machine", Name: "open-" + strconv.Itoa(m), Machine: "open-" + strconv.Itoa(m),
			TTLMs: seedTTLMs, Attrs: map[string]json.RawMessage{"load": seedLoad(m, 0)}}
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err) // a fixed struct of strings, ints and valid JSON always encodes
	}
	return b
}

// renewLease renews a held port lease.
func (c *elClient) renewLease(ctx context.Context, h heldLease) error {
	return c.do(ctx, http.MethodPost, "/v1/leases/port/"+strconv.Itoa(h.port)+"/heartbeat", nil,
		http.Header{wire.HeaderPortLeaseID: {h.leaseID}}, http.StatusOK, nil)
}

// openWorkers prepares the elanous side of the open row: the members'
// records (its own, when --open-members), up to --leases port leases for
// the lease renewals, one client per connection, and the priming.
func (s *elanousSystem) openWorkers(ctx context.Context, o options, c cadence, total int, rr *openRowReport, pr *printer) ([]openStep, func(), error) {
	pop := openMembersPop{own: o.openMembers > 0, shape: o.fillShape}
	rr.Records = "fill"
	if pop.own {
		rr.Records = "own"
		pr.logf("elanous: open: registering %d members' machine and instance records (600 s TTL)", c.members)
		cs := s.clients(o.clients, -1, requestTimeout)
		err := runParallel(ctx, 2*c.members, o.clients, func(ctx context.Context, w, r int) error {
			body := pop.ownRegister(r)
			return retry(ctx, 3, func(ctx context.Context) error { return cs[w].register(ctx, body) })
		}, nil)
		closeIdle(cs)
		if err != nil {
			return nil, nil, fmt.Errorf("register the members: %w", err)
		}
	}
	var held []heldLease
	release := func(context.Context) error { return nil }
	if n := min(c.members*c.leases, o.leases); n > 0 {
		var err error
		if held, release, err = s.holdLeases(ctx, n, "open-lease", seedTTLMs); err != nil {
			return nil, nil, err
		}
	}
	rr.HeldLeases = len(held)
	cs := s.clients(o.openClients, -1, requestTimeout)
	cleanup := func() {
		closeIdle(cs)
		if err := release(context.WithoutCancel(ctx)); err != nil {
			pr.logf("elanous: open: %v", err)
		}
	}
	leaseOf := func(ev openEvent) int { return (ev.member*c.leases + ev.lease) % max(1, len(held)) }
	do := func(ctx context.Context, cl *elClient, k int) error {
		ev := c.event(k)
		switch {
		case ev.kind == eventLoad:
			return cl.heartbeatWith(ctx, pop.machineID(ev.member), loadBeat(ev.member, k))
		case ev.kind == eventLease && len(held) > 0:
			return cl.renewLease(ctx, held[leaseOf(ev)])
		case ev.kind == eventLease:
			return fmt.Errorf("no lease held for a lease renewal")
		}
		return cl.heartbeat(ctx, pop.instanceID(ev.member))
	}
	t0 := time.Now()
	key := func(ev openEvent) (string, bool) {
		switch ev.kind {
		case eventInstance:
			return "instance " + strconv.Itoa(ev.member), true
		case eventLease:
			return "lease " + strconv.Itoa(leaseOf(ev)), true
		}
		return "", false
	}
	primed, err := primeOpen(ctx, c, total, o.clients, key, func(ctx context.Context, w, k int) error {
		return retry(ctx, 3, func(ctx context.Context) error { return do(ctx, cs[w%len(cs)], k) })
	})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("prime: %w", err)
	}
	rr.Primed, rr.PrimeSeconds = primed, time.Since(t0).Seconds()
	var workers []openStep
	for _, cl := range cs {
		workers = append(workers, func(ctx context.Context, k int) error { return do(ctx, cl, k) })
	}
	return workers, cleanup, nil
}

// primeOpen sends, before the clock starts, the first renewal of every
// record that requests 0..total-1 renew (key names a request's record and
// says whether it is a renewal; send is called with the first request number
// of each such record), and returns how many it sent. A record registered or acquired before
// the run is renewed with a write and the slack the first time, and is
// covered from then on; a member in its steady state is in that position
// at every renewal but one per slack, so the primed run measures the
// steady state's renewals, not a cold start's writes. Load heartbeats
// change their record every time and need no priming.
func primeOpen(ctx context.Context, c cadence, total, clients int, key func(openEvent) (string, bool), send func(ctx context.Context, worker, k int) error) (int, error) {
	var firsts []int
	seen := map[string]bool{}
	for k := range total {
		rec, renewal := key(c.event(k))
		if renewal && !seen[rec] {
			seen[rec] = true
			firsts = append(firsts, k)
		}
	}
	return len(firsts), runParallel(ctx, len(firsts), clients, func(ctx context.Context, w, i int) error {
		return send(ctx, w, firsts[i])
	}, nil)
}

// runOpenRow runs the open row against s: the members' stream for
// --rate-duration at openRate, and on elanous each node's footprint and
// snapshots meanwhile. rr is filled on elanous (the row's report).
func runOpenRow(ctx context.Context, s system, o options, rr *openRowReport, pr *printer) (*stats, error) {
	c := openCadence(o)
	rate := openRate(o)
	total := schedule{rate: rate, d: o.rateDuration}.total()
	rr.Members, rr.Leases, rr.PerCycle, rr.CadencePerSec, rr.Mix = c.members, c.leases, c.perCycle(), c.rate(), c.mixOf(total)
	pr.logf("%s: open: %d members, %d leases each, %d requests per member per 300 s: %s/s at the cadence, offering %s/s for %s over %d connections",
		s.Name(), c.members, c.leases, c.perCycle(), thousands(c.rate()), thousands(rate), o.rateDuration, o.openClients)
	var workers []openStep
	var cleanup func()
	var err error
	es, isElanous := s.(*elanousSystem)
	if isElanous {
		workers, cleanup, err = es.openWorkers(ctx, o, c, total, rr, pr)
	} else {
		workers, cleanup, err = s.(*etcdSystem).openWorkers(ctx, c, o.openClients)
	}
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var smp *sampler
	started := time.Now()
	if isElanous {
		pr.logf("elanous: open: primed %d instances and leases in %.1fs", rr.Primed, rr.PrimeSeconds)
		smp = startSampler(ctx, o.sampleEvery, es.sample)
	}
	every := progressEvery(o.rateDuration)
	var last time.Duration
	st := runOpenLoop(ctx, workers, rate, o.rateDuration, func(elapsed time.Duration, ops, errs int64) {
		if elapsed-last >= every {
			last = elapsed
			pr.logf("%s: open: %5.0fs %8d ok %6d errors (%s/s so far)", s.Name(), elapsed.Seconds(), ops, errs, thousands(float64(ops)/elapsed.Seconds()))
		}
	})
	if smp != nil {
		rr.Peaks = smp.stop()
		if rr.Snapshots, err = es.snapshotsIn(ctx, started); err != nil {
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	pr.logf("%s: open: %s", s.Name(), st.openSummary())
	if st.Ops == 0 {
		return nil, fmt.Errorf("no operation succeeded (%d errors: %s)", st.Errors, st.errorText())
	}
	return st, nil
}
