// Package workload drives a cluster the way its members do and records what
// happened: concurrent clients acquiring, renewing and releasing port leases,
// registering, heartbeating and deleting resources, reading both tables with
// ?consistent=true and polling /v1/primary, each against a random node. Every
// operation is recorded with monotonic call and return times and classified
// as ok, failed (definitely not applied) or indeterminate (may have been
// applied), for package check.
package workload

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/wire"
)

// Target is one node the clients may talk to.
type Target struct {
	Name  string
	URL   string
	Epoch func() int // the node's process incarnation, for per-node checks
}

// Config describes a workload.
type Config struct {
	Targets []Target
	Tokens  wire.TokensFile
	// Clients is the number of concurrent clients (at least 8 are used).
	Clients int
	// ShortTTL is the TTL of the leases that may expire during a run.
	ShortTTL time.Duration
	// Pace is the mean pause between one client's operations.
	Pace time.Duration
	Seed uint64
	// TLS is the client configuration for an HTTPS cluster; nil for plaintext.
	TLS *tls.Config
	// Renewers is the number of renewal members (renewers.go) running beside
	// the clients; RenewTTL is their records' and leases' TTL (default 4 s).
	Renewers int
	RenewTTL time.Duration
}

// Long TTLs: longer than any run, so these records never expire and the
// models can hold them to exact answers.
const (
	LongLeaseTTL    = 24 * time.Hour
	ResourceTTL     = 24 * time.Hour
	leaseTimeout    = time.Second // the TypeScript client's timeout for lease heartbeat and release
	writeTimeout    = 3 * time.Second
	readTimeout     = 3 * time.Second
	numResourceIDs  = 6
	finalReadClient = 1000
)

// ResourceIDs are the ids the resource clients contend on; the slash makes
// every path carry %2F.
func ResourceIDs() []string {
	ids := make([]string, numResourceIDs)
	for i := range ids {
		if i%2 == 0 {
			ids[i] = fmt.Sprintf("instance:chaos-host/%d", i)
		} else {
			ids[i] = fmt.Sprintf("machine:chaos-m%d", i)
		}
	}
	return ids
}

// Recorder collects operations from concurrent clients.
type Recorder struct {
	start time.Time // with its monotonic reading
	mu    sync.Mutex
	ops   []check.Op // guarded by mu
}

// NewRecorder starts the monotonic clock operations are timed with.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// WallStartMs is the wall clock (Unix ms) at the recorder's time 0, for
// check.Clock.
func (r *Recorder) WallStartMs() int64 { return r.start.UnixMilli() }

// Now is the recorder's monotonic time in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Add records one operation.
func (r *Recorder) Add(o check.Op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// Ops returns a copy of everything recorded so far.
func (r *Recorder) Ops() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.Op(nil), r.ops...)
}

// Workload is a set of clients sharing one recorder.
type Workload struct {
	cfg  Config
	Rec  *Recorder
	http *http.Client
}

// New prepares a workload; Run starts it.
func New(cfg Config, rec *Recorder) *Workload {
	if cfg.Clients < 8 {
		cfg.Clients = 8
	}
	if cfg.ShortTTL == 0 {
		cfg.ShortTTL = 3 * time.Second
	}
	if cfg.Pace == 0 {
		cfg.Pace = 50 * time.Millisecond
	}
	if cfg.RenewTTL == 0 {
		cfg.RenewTTL = 4 * time.Second
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 500 * time.Millisecond}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     5 * time.Second,
		TLSClientConfig:     cfg.TLS,
	}
	return &Workload{cfg: cfg, Rec: rec, http: &http.Client{Transport: tr}}
}

// Run runs every client until ctx is done and waits for them to stop.
func (w *Workload) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if w.cfg.Renewers > 0 {
		wg.Go(func() { w.runRenewers(ctx) })
	}
	for i := 0; i < w.cfg.Clients; i++ {
		c := &client{w: w, id: i, rng: rand.New(rand.NewPCG(w.cfg.Seed, uint64(i)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 9 {
			case 0, 2, 4, 6:
				c.leases(ctx)
			case 1, 5, 7:
				c.resources(ctx)
			default:
				c.reads(ctx)
			}
		}()
	}
	wg.Wait()
	w.http.CloseIdleConnections()
}

// FinalRead reads both tables with ?consistent=true through node t and records
// the reads; it returns what they listed.
func (w *Workload) FinalRead(ctx context.Context, t int) ([]wire.PortLease, []wire.Resource, error) {
	c := &client{w: w, id: finalReadClient + t, rng: rand.New(rand.NewPCG(1, uint64(t)))}
	lo := c.read(ctx, t, check.LeaseRead)
	ro := c.read(ctx, t, check.ResRead)
	if lo.Outcome != check.OK || ro.Outcome != check.OK {
		return nil, nil, fmt.Errorf("final read through %s: leases %d %s, resources %d %s",
			w.cfg.Targets[t].Name, lo.Status, lo.Code, ro.Status, ro.Code)
	}
	return lo.Leases, ro.Resources, nil
}

type client struct {
	w       *Workload
	id      int
	rng     *rand.Rand
	seq     int
	renewer bool // a renewal member: its operations are marked Renewer
}

// pause sleeps a random time, up to twice mean (see sleep).
func (c *client) pause(ctx context.Context, mean time.Duration) bool {
	return c.sleep(ctx, time.Duration(c.rng.Int64N(int64(2*mean)+1)))
}

func (c *client) target() int { return c.rng.IntN(len(c.w.cfg.Targets)) }

// response is what one HTTP exchange produced.
type response struct {
	status int
	code   string
	header http.Header
	body   []byte
	err    error
	sent   bool // the request may have reached the server
}

func (c *client) do(ctx context.Context, t int, method, path string, body any, timeout time.Duration, hdr map[string]string) response {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The transport retries a request on a fresh connection when a reused one
	// breaks, and treats one with an Idempotency-Key as safe to retry even as a
	// POST: a dial error can then follow a request the server did receive.
	// Only a request never written anywhere is known not to have happened.
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, c.w.cfg.Targets[t].URL+path, rd)
	if err != nil {
		return response{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok := c.w.cfg.Tokens.Member
	if method == http.MethodGet {
		tok = c.w.cfg.Tokens.Query
	}
	if !strings.HasPrefix(path, "/v1/primary") {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.w.http.Do(req)
	if err != nil {
		var op *net.OpError
		dialFailed := errors.As(err, &op) && op.Op == "dial"
		return response{err: err, sent: wrote.Load() || !dialFailed}
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	r := response{status: resp.StatusCode, header: resp.Header, body: b, sent: true}
	if rerr != nil {
		r.err = rerr
	}
	if resp.StatusCode >= 400 {
		var e wire.Error
		if json.Unmarshal(b, &e) == nil {
			r.code = e.Error
		}
	}
	return r
}

// classify maps a write's answer to an outcome: 2xx ok; 4xx, 503 no-leader
// and not-ready and unsent requests failed; everything else indeterminate.
func classify(r response, okStatus int) check.Outcome {
	switch {
	case r.err != nil && r.status == 0:
		if !r.sent {
			return check.Failed
		}
		return check.Indeterminate
	case r.status == okStatus && r.err == nil:
		return check.OK
	case r.status == okStatus:
		return check.Indeterminate // the body was cut off
	case r.status >= 400 && r.status < 500:
		return check.Failed
	case r.status == http.StatusServiceUnavailable && (r.code == wire.CodeNoLeader || r.code == wire.CodeNotReady):
		return check.Failed
	}
	return check.Indeterminate
}

func (c *client) record(o check.Op, t int, call int64, r response) check.Op {
	tg := c.w.cfg.Targets[t]
	o.Client, o.Node, o.Call, o.Return, o.Renewer = c.id, tg.Name, call, c.w.Rec.Now(), c.renewer
	if tg.Epoch != nil {
		o.Epoch = tg.Epoch()
	}
	o.Status, o.Code = r.status, r.code
	if r.err != nil && o.Code == "" {
		o.Code = trimErr(r.err)
	}
	c.w.Rec.Add(o)
	return o
}

func trimErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

func genOf(h http.Header) uint64 {
	g, _ := strconv.ParseUint(h.Get(wire.HeaderGeneration), 10, 64)
	return g
}

// encodeID escapes a resource id as JavaScript's encodeURIComponent does.
func encodeID(id string) string {
	return strings.ReplaceAll(url.QueryEscape(id), "+", "%20")
}
