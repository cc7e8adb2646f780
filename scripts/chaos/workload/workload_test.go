package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/wire"
)

// fakeServer is a single-node, in-memory stand-in for the cluster's API,
// correct unless stale is set: then consistent lease reads answer from a copy
// of the table taken a while ago.
type fakeServer struct {
	mu        sync.Mutex
	leases    map[int]wire.PortLease
	idem      map[string]int
	resources map[string]wire.Resource
	next      int
	stale     bool
	snapshot  []wire.PortLease
	snapAt    time.Time
	// early makes the server expire resources this long before the
	// expiresAt it answered.
	early time.Duration
}

func newFake() *fakeServer {
	return &fakeServer{leases: map[int]wire.PortLease{}, idem: map[string]int{}, resources: map[string]wire.Resource{}}
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now().UnixMilli()
	for p, l := range f.leases {
		if l.ExpiresAt <= now {
			delete(f.leases, p)
		}
	}
	for id, res := range f.resources {
		if res.ExpiresAt != 0 && res.ExpiresAt-f.early.Milliseconds() <= now {
			delete(f.resources, id)
		}
	}
	w.Header().Set(wire.HeaderGeneration, "7")
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if v != nil {
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	fail := func(status int, code string) { reply(status, wire.Error{Error: code, Message: code}) }
	path := r.URL.EscapedPath()
	switch {
	case path == "/v1/primary":
		reply(200, wire.Primary{Known: true, Holder: "node-a", Generation: 7})
	case path == "/v1/leases/port" && r.Method == http.MethodPost:
		var req wire.AcquireRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if p, ok := f.idem[r.Header.Get(wire.HeaderIdempotencyKey)]; ok {
			if l, ok := f.leases[p]; ok && l.Purpose == req.Purpose {
				reply(201, l)
				return
			}
		}
		for p := 31450; p <= 31499; p++ {
			if _, ok := f.leases[p]; ok {
				continue
			}
			f.next++
			l := wire.PortLease{Port: p, LeaseID: fmt.Sprintf("lease-%d", f.next), Purpose: req.Purpose, TTLMs: req.TTLMs,
				GrantedAt: now, ExpiresAt: now + req.TTLMs, Generation: 7, Owner: ownerOf(r)}
			f.leases[p] = l
			f.idem[r.Header.Get(wire.HeaderIdempotencyKey)] = p
			reply(201, l)
			return
		}
		fail(409, wire.CodePortBandExhausted)
	case path == "/v1/leases/port" && r.Method == http.MethodGet:
		var ls []wire.PortLease
		if f.stale && time.Since(f.snapAt) < 300*time.Millisecond {
			ls = f.snapshot
		} else {
			for _, l := range f.leases {
				ls = append(ls, l)
			}
			f.snapshot, f.snapAt = ls, time.Now()
		}
		if ls == nil {
			ls = []wire.PortLease{}
		}
		reply(200, ls)
	case strings.HasPrefix(path, "/v1/leases/port/"):
		rest := strings.TrimPrefix(path, "/v1/leases/port/")
		p, _ := strconv.Atoi(strings.TrimSuffix(rest, "/heartbeat"))
		l, ok := f.leases[p]
		switch {
		case !ok:
			fail(404, wire.CodeNotFound)
		case l.LeaseID != r.Header.Get(wire.HeaderPortLeaseID):
			fail(409, wire.CodeLeaseMismatch)
		case r.Method == http.MethodDelete:
			delete(f.leases, p)
			reply(204, nil)
		default:
			l.ExpiresAt = now + l.TTLMs
			f.leases[p] = l
			reply(200, wire.LeaseHeartbeatResponse{Port: p, LeaseID: l.LeaseID, ExpiresAt: l.ExpiresAt})
		}
	case path == "/v1/resources/register":
		var req wire.RegisterRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		res := wire.Resource{ID: req.ID, Kind: req.Kind, Attrs: req.Attrs, Owner: ownerOf(r), TTLMs: req.TTLMs, ExpiresAt: now + req.TTLMs}
		f.resources[req.ID] = res
		reply(200, res)
	case path == "/v1/resources" && r.Method == http.MethodGet:
		rs := []wire.Resource{}
		for _, res := range f.resources {
			rs = append(rs, res)
		}
		reply(200, rs)
	case strings.HasPrefix(path, "/v1/resources/"):
		raw := strings.TrimSuffix(strings.TrimPrefix(path, "/v1/resources/"), "/heartbeat")
		id, _ := url.PathUnescape(raw)
		res, ok := f.resources[id]
		if !ok {
			fail(404, wire.CodeNotFound)
			return
		}
		if r.Method == http.MethodDelete {
			delete(f.resources, id)
			reply(204, nil)
			return
		}
		var req wire.HeartbeatRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		attrs := map[string]json.RawMessage{}
		for k, v := range res.Attrs {
			attrs[k] = v
		}
		for k, v := range req.Attrs {
			attrs[k] = v
		}
		res.Attrs = attrs
		res.ExpiresAt = now + res.TTLMs
		f.resources[id] = res
		reply(200, wire.HeartbeatResponse{ID: id, ExpiresAt: res.ExpiresAt})
	default:
		fail(404, wire.CodeNotFound)
	}
}

func runAgainst(t *testing.T, f *fakeServer, d time.Duration) []check.Op {
	t.Helper()
	h, _ := runRenewersAgainst(t, f, d, 0)
	return h
}

// runRenewersAgainst runs the workload with renewers renewal members on a
// 400 ms TTL beside the clients; it returns the history and its clock.
func runRenewersAgainst(t *testing.T, f *fakeServer, d time.Duration, renewers int) ([]check.Op, check.Clock) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	rec := NewRecorder()
	w := New(Config{Targets: []Target{{Name: "fake", URL: srv.URL}}, Clients: 9, ShortTTL: 300 * time.Millisecond,
		Tokens: wire.TokensFile{Member: strings.Repeat("ab", 32), Query: strings.Repeat("cd", 32)},
		Pace:   5 * time.Millisecond, Seed: 1, Renewers: renewers, RenewTTL: 400 * time.Millisecond}, rec)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w.Run(ctx)
	if _, _, err := w.FinalRead(context.Background(), 0); err != nil {
		t.Fatalf("FinalRead() = %v", err)
	}
	return rec.Ops(), check.Clock{WallStartMs: rec.WallStartMs(), Skews: []time.Duration{0}}
}

// ownerOf is the owner the server stamps: the bearer token's fingerprint.
func ownerOf(r *http.Request) string {
	sum := sha256.Sum256([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
	return hex.EncodeToString(sum[:8])
}

// A correct server passes, with records of another client beside the
// workload's (the abuse scenario's members): the workload leaves them out.
func TestWorkload_CorrectServerPasses(t *testing.T) {
	f := newFake()
	far := time.Now().Add(time.Hour).UnixMilli()
	f.leases[31499] = wire.PortLease{Port: 31499, LeaseID: "foreign", Purpose: "svc", Owner: "0123456789abcdef", TTLMs: 3_600_000, ExpiresAt: far}
	f.resources["machine:good-0"] = wire.Resource{ID: "machine:good-0", Kind: "machine", Owner: "0123456789abcdef"}
	h := runAgainst(t, f, 1500*time.Millisecond)
	kinds := map[check.Kind]int{}
	for _, o := range h {
		if o.Outcome == check.OK {
			kinds[o.Kind]++
		}
	}
	for _, k := range []check.Kind{check.LeaseAcquire, check.LeaseRenew, check.LeaseRelease, check.LeaseRead,
		check.ResRegister, check.ResHeartbeat, check.ResDelete, check.ResRead, check.PrimaryPoll} {
		if kinds[k] == 0 {
			t.Errorf("no successful %s in %d operations", k, len(h))
		}
	}
	res := check.Check(h, check.Options{Timeout: time.Minute})
	if !res.Linearizable || len(res.Violations) > 0 {
		t.Errorf("Check(history of a correct server) = %v %v, want linearizable, no violations", res.Linearizable, res.Violations)
	}
}

func TestWorkload_StaleReadsAreCaught(t *testing.T) {
	f := newFake()
	f.stale = true
	h := runAgainst(t, f, 1500*time.Millisecond)
	if res := check.Check(h, check.Options{Timeout: time.Minute}); res.Linearizable {
		t.Errorf("Check(history with stale consistent reads).Linearizable = true, want false")
	}
}

func TestEncodeID(t *testing.T) {
	if got, want := encodeID("instance:host/1 a"), "instance%3Ahost%2F1%20a"; got != want {
		t.Errorf("encodeID() = %q, want %q", got, want)
	}
}

// Renewal members against a correct server pass the whole check; against
// one that expires records 150 ms before the expiresAt it answered, the
// renewal check catches the early expiry.
func TestWorkload_RenewersCatchEarlyExpiry(t *testing.T) {
	h, clk := runRenewersAgainst(t, newFake(), 1500*time.Millisecond, 2)
	acks := 0
	for _, o := range h {
		if o.Renewer && o.Outcome == check.OK && o.ExpiresAt > 0 {
			acks++
		}
	}
	if acks < 10 {
		t.Fatalf("%d acknowledged renewal-member answers with an expiresAt in %d operations, want at least 10", acks, len(h))
	}
	if res := check.Check(h, check.Options{Timeout: time.Minute, Clock: clk}); !res.Linearizable || len(res.Violations) > 0 {
		t.Errorf("Check(renewers against a correct server) = %v %v, want linearizable, no violations", res.Linearizable, res.Violations)
	}
	f := newFake()
	f.early = 150 * time.Millisecond
	h, clk = runRenewersAgainst(t, f, 1500*time.Millisecond, 2)
	found := map[string]bool{}
	for _, v := range check.CheckRenewals(h, clk) {
		found[v.Kind] = true
	}
	if !found["renewal-expired-early"] && !found["renewal-expired-before-expiresAt"] {
		t.Errorf("CheckRenewals(server expiring 150 ms early) found %v, want an early expiry", found)
	}
}
