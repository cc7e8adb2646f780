package abuse

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/time/rate"

	"github.com/elanous/elanous-node/wire"
)

// abuseWorkers is the abusive member's concurrency: enough that, at the
// latency of a loaded two-core machine (about 100 ms a request), it still
// sends faster than three nodes' write rate limits let through.
const abuseWorkers = 48

// abuseWrites is the abusive member: a pool of workers sending, within
// AbuseRate, registrations of new resources (15 KiB of attrs each),
// acquires for itself and for others, heartbeats of random ids, and every
// kind of id squatting against the members.
func (r *run) abuseWrites(ctx context.Context, token string) {
	c := newClient(r.cfg.AbuserAddr, 3*time.Second, 0)
	lim := rate.NewLimiter(rate.Limit(r.cfg.AbuseRate), 50)
	attrs := map[string]json.RawMessage{"blob": json.RawMessage(strconv.Quote(strings.Repeat("x", r.cfg.AttrsBytes-16)))}
	var seq atomic.Int64
	var wg sync.WaitGroup
	for w := range abuseWorkers {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for lim.Wait(ctx) == nil {
				r.abuseOnce(ctx, c, token, rng, attrs, &seq)
			}
		})
	}
	wg.Wait()
}

func (r *run) abuseOnce(ctx context.Context, c *http.Client, token string, rng *mrand.Rand, attrs map[string]json.RawMessage, seq *atomic.Int64) {
	kind := abuseKinds[len(abuseKinds)-1].kind
	p := rng.IntN(100)
	for _, k := range abuseKinds {
		if p < k.below {
			kind = k.kind
			break
		}
	}
	a := r.abuse(ctx, c, token, kind, rng, attrs, seq)
	if ctx.Err() != nil {
		return
	}
	r.count(kind, a)
}

// abuseKinds are the abusive member's requests and their shares of its
// flood: a kind is drawn when a number below 100 is below its bound.
var abuseKinds = []struct {
	kind  string
	below int
}{
	{"abuser register", 30}, {"abuser acquire", 42}, {"abuser acquire other", 47}, {"abuser random heartbeat", 80},
	{"abuser squat register", 84}, {"abuser squat id", 88}, {"abuser squat heartbeat", 92}, {"abuser squat delete", 96},
	{"abuser squat release", 100},
}

// abuse sends one abusive request of kind to a random node, against a
// random member (victim) for the squats.
func (r *run) abuse(ctx context.Context, c *http.Client, token, kind string, rng *mrand.Rand, attrs map[string]json.RawMessage, seq *atomic.Int64) answer {
	url := r.target()
	r.mu.Lock()
	v := victim{machine: "good-0", resource: "machine:good-0"}
	if len(r.victims) > 0 {
		v = r.victims[rng.IntN(len(r.victims))]
	}
	r.mu.Unlock()
	ttl := int64(24 * time.Hour / time.Millisecond)
	var a answer
	switch kind {
	case "abuser register":
		id := fmt.Sprintf("instance:abuser/%d", seq.Add(1))
		a = do(ctx, c, http.MethodPost, url+"/v1/resources/register", token, nil,
			wire.RegisterRequest{ID: id, Kind: "instance", Name: "abuser", Machine: "abuser", TTLMs: ttl, Attrs: attrs})
		if a.err == nil && a.status == http.StatusOK {
			r.mu.Lock()
			r.granted[id] = true
			r.mu.Unlock()
		}
	case "abuser acquire":
		a = do(ctx, c, http.MethodPost, url+"/v1/leases/port", token, nil, wire.AcquireRequest{Machine: "abuser", Purpose: "squat", TTLMs: ttl})
		if a.err == nil && a.status == http.StatusCreated {
			r.mu.Lock()
			r.report.GrantedLeases++
			r.mu.Unlock()
		}
	case "abuser acquire other":
		a = do(ctx, c, http.MethodPost, url+"/v1/leases/port", token, nil, wire.AcquireRequest{Machine: v.machine, Purpose: "squat", TTLMs: ttl})
	case "abuser random heartbeat":
		a = do(ctx, c, http.MethodPost, url+"/v1/resources/"+escape(fmt.Sprintf("instance:abuser/x%d", rng.Int64()))+"/heartbeat", token, nil, nil)
	case "abuser squat register":
		a = do(ctx, c, http.MethodPost, url+"/v1/resources/register", token, nil,
			wire.RegisterRequest{ID: v.resource, Kind: "machine", Name: v.machine, Machine: v.machine, TTLMs: ttl})
	case "abuser squat id":
		a = do(ctx, c, http.MethodPost, url+"/v1/resources/register", token, nil,
			wire.RegisterRequest{ID: v.resource, Kind: "machine", Name: "abuser", Machine: "abuser", TTLMs: ttl})
	case "abuser squat heartbeat":
		a = do(ctx, c, http.MethodPost, url+"/v1/resources/"+escape(v.resource)+"/heartbeat", token, nil, nil)
	case "abuser squat delete":
		a = do(ctx, c, http.MethodDelete, url+"/v1/resources/"+escape(v.resource), token, nil, nil)
	case "abuser squat release":
		a = do(ctx, c, http.MethodDelete, fmt.Sprintf("%s/v1/leases/port/%d", url, v.port), token,
			map[string]string{wire.HeaderPortLeaseID: randomHex(16)}, nil)
	default:
		a = answer{err: fmt.Errorf("unknown kind %q", kind)}
	}
	return a
}

// blockingWave is the token-less client's 10,000 blocking queries: all
// opened at once, on random nodes, each waiting for a change of the primary
// that never comes; those refused try once more a few seconds later.
func (r *run) blockingWave(ctx context.Context) {
	c := newClient(r.cfg.AnonymousAddr, 0, 0)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	var wg sync.WaitGroup
	for i := range r.cfg.BlockingQueries {
		wg.Go(func() {
			for try := 0; try < 2 && ctx.Err() == nil; try++ {
				if try > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Duration(1000+mrand.IntN(4000)) * time.Millisecond):
					}
				}
				a := do(ctx, c, http.MethodGet, r.target()+"/v1/primary?index=1000000000&wait=5m", "", nil, nil)
				if ctx.Err() != nil && a.err != nil {
					return // held until the end: the cap let it wait
				}
				r.count("anonymous blocking query", a)
				if a.err == nil && a.status == http.StatusOK {
					return
				}
			}
		})
		if i%500 == 499 {
			time.Sleep(10 * time.Millisecond) // let the harness's dials breathe
		}
	}
	wg.Wait()
}

// anonymousFlood is the token-less client's other floods, within
// AnonymousRate: writes with random tokens (followers must not forward them
// all to the leader) and random HTTP methods on random paths (the metrics
// registry must not grow).
func (r *run) anonymousFlood(ctx context.Context) {
	c := newClient(r.cfg.AnonymousAddr, 3*time.Second, 0)
	lim := rate.NewLimiter(rate.Limit(r.cfg.AnonymousRate), 20)
	for i := 0; lim.Wait(ctx) == nil; i++ {
		kind := "anonymous random token"
		if i%2 == 1 {
			kind = "anonymous random method"
		}
		a := r.anonymous(ctx, c, kind)
		if ctx.Err() == nil {
			r.count(kind, a)
		}
	}
}

// anonymousPaths are where random methods go (with a random suffix half
// the time).
var anonymousPaths = []string{"/v1/primary", "/v1/resources", "/v1/leases/port", "/v1/cluster/status", "/metrics", "/nope", "/v1/x/y"}

// anonymous sends one of the token-less client's requests to a random node:
// a heartbeat with a random token, or a random method on a random path.
func (r *run) anonymous(ctx context.Context, c *http.Client, kind string) answer {
	url := r.target()
	if kind == "anonymous random token" {
		return do(ctx, c, http.MethodPost, url+"/v1/resources/machine%3Agood-0/heartbeat", randomHex(32), nil, nil)
	}
	method := "X" + strings.ToUpper(randomHex(4))
	path := anonymousPaths[mrand.IntN(len(anonymousPaths))]
	if mrand.IntN(2) == 0 {
		path += "/" + randomHex(6)
	}
	return do(ctx, c, method, url+path, "", nil, nil)
}

// sampleBlocking scrapes every node's elanous_blocking_queries until ctx ends.
func (r *run) sampleBlocking(ctx context.Context) {
	c := newClient(r.cfg.MemberAddr, 2*time.Second, 0)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, t := range r.cfg.Targets {
			if v, ok := scrape(ctx, c, t, "elanous_blocking_queries"); ok {
				r.mu.Lock()
				r.report.MaxBlocking[t] = max(r.report.MaxBlocking[t], int(v))
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// countSeries counts each node's request series.
func (r *run) countSeries(ctx context.Context) {
	c := newClient(r.cfg.MemberAddr, 5*time.Second, 0)
	for _, t := range r.cfg.Targets {
		if n, ok := series(ctx, c, t, "elanous_http_requests_total"); ok {
			r.mu.Lock()
			r.report.Series[t] = n
			r.mu.Unlock()
		}
	}
}

func metricFamilies(ctx context.Context, c *http.Client, url string) (map[string]*dto.MetricFamily, bool) {
	a := do(ctx, c, http.MethodGet, url+"/metrics", "", nil, nil)
	if a.err != nil || a.status != http.StatusOK {
		return nil, false
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(a.body))
	if err != nil {
		return nil, false
	}
	return mfs, true
}

func scrape(ctx context.Context, c *http.Client, url, name string) (float64, bool) {
	mfs, ok := metricFamilies(ctx, c, url)
	if !ok || mfs[name] == nil || len(mfs[name].GetMetric()) == 0 {
		return 0, false
	}
	return mfs[name].GetMetric()[0].GetGauge().GetValue(), true
}

func series(ctx context.Context, c *http.Client, url, name string) (int, bool) {
	mfs, ok := metricFamilies(ctx, c, url)
	if !ok || mfs[name] == nil {
		return 0, false
	}
	return len(mfs[name].GetMetric()), true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
