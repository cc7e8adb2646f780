package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/wire"
)

// held is a lease a client believes it holds.
type held struct {
	port    int
	leaseID string
	ttl     time.Duration
	short   bool
}

// leases acquires a lease, renews it a few times and releases it (or, for a
// short lease now and then, lets it expire), forever. An acquire whose
// outcome is unknown is retried once with the same Idempotency-Key; a grant
// still unaccounted for is looked for in the client's next consistent read
// and released, so the band does not fill with orphans.
func (c *client) leases(ctx context.Context) {
	var orphans []string
	for ctx.Err() == nil {
		if len(orphans) > 0 {
			orphans = c.reclaim(ctx, orphans)
		}
		c.seq++
		short := c.rng.IntN(10) < 3
		ttl := LongLeaseTTL
		if short {
			ttl = c.w.cfg.ShortTTL
		}
		purpose := fmt.Sprintf("c%d-%d", c.id, c.seq)
		if short {
			purpose += "-short"
		}
		o := c.acquire(ctx, purpose, ttl, short)
		if o.Outcome == check.Indeterminate && c.pause(ctx, 100*time.Millisecond) {
			o = c.acquire(ctx, purpose, ttl, short)
		}
		switch o.Outcome {
		case check.Indeterminate:
			orphans = append(orphans, purpose)
			continue
		case check.Failed:
			c.pause(ctx, 200*time.Millisecond)
			continue
		}
		h := held{port: o.Port, leaseID: o.LeaseID, ttl: ttl, short: short}
		lost := false
		for n := 1 + c.rng.IntN(5); n > 0 && !lost; n-- {
			every := 4 * c.w.cfg.Pace
			if short {
				every = min(every, c.w.cfg.ShortTTL/4)
			}
			if !c.pause(ctx, every) {
				break
			}
			r := c.renew(ctx, h)
			lost = r.Outcome == check.Failed && (r.Status == http.StatusNotFound || r.Status == http.StatusConflict)
		}
		if lost {
			continue
		}
		if short && c.rng.IntN(5) == 0 {
			continue // abandon it: the leader's sweep must expire it
		}
		for try := 0; try < 3; try++ {
			r := c.release(context.WithoutCancel(ctx), h)
			if r.Outcome == check.OK || r.Status == http.StatusNotFound || r.Status == http.StatusConflict {
				break
			}
			if !c.pause(ctx, 200*time.Millisecond) {
				break
			}
		}
		c.pause(ctx, c.w.cfg.Pace)
	}
}

func (c *client) acquire(ctx context.Context, purpose string, ttl time.Duration, short bool) check.Op {
	return c.acquireAs(ctx, fmt.Sprintf("chaos-m%d", c.id), purpose, ttl, short)
}

func (c *client) acquireAs(ctx context.Context, machine, purpose string, ttl time.Duration, short bool) check.Op {
	t := c.target()
	body := wire.AcquireRequest{Machine: machine, Purpose: purpose, TTLMs: ttl.Milliseconds()}
	call := c.w.Rec.Now()
	r := c.do(ctx, t, http.MethodPost, "/v1/leases/port", body, writeTimeout, map[string]string{wire.HeaderIdempotencyKey: purpose})
	o := check.Op{Kind: check.LeaseAcquire, Purpose: purpose, TTLMs: ttl.Milliseconds(), Short: short,
		Outcome: classify(r, http.StatusCreated)}
	if o.Outcome == check.OK {
		var l wire.PortLease
		if err := json.Unmarshal(r.body, &l); err != nil || l.LeaseID == "" {
			o.Outcome = check.Indeterminate
		} else {
			o.Port, o.LeaseID, o.Generation, o.ExpiresAt = l.Port, l.LeaseID, l.Generation, l.ExpiresAt
			o.Leases = []wire.PortLease{l}
		}
	}
	if ctx.Err() != nil && o.Outcome == check.Indeterminate {
		o.Code = "cancelled at end of run"
	}
	return c.record(o, t, call, r)
}

func (c *client) renew(ctx context.Context, h held) check.Op {
	return c.onHeld(ctx, h, check.LeaseRenew)
}

func (c *client) release(ctx context.Context, h held) check.Op {
	return c.onHeld(ctx, h, check.LeaseRelease)
}

// onHeld renews (check.LeaseRenew) or releases (check.LeaseRelease) the held
// lease h under its lease id and records the call; a renewal the node answers
// carries the new expiry and whether it was written.
func (c *client) onHeld(ctx context.Context, h held, kind check.Kind) check.Op {
	method, path, want := http.MethodPost, fmt.Sprintf("/v1/leases/port/%d/heartbeat", h.port), http.StatusOK
	if kind == check.LeaseRelease {
		method, path, want = http.MethodDelete, fmt.Sprintf("/v1/leases/port/%d", h.port), http.StatusNoContent
	}
	t := c.target()
	call := c.w.Rec.Now()
	r := c.do(ctx, t, method, path, nil, leaseTimeout, map[string]string{wire.HeaderPortLeaseID: h.leaseID})
	o := check.Op{Kind: kind, Port: h.port, LeaseID: h.leaseID, TTLMs: h.ttl.Milliseconds(), Short: h.short,
		Outcome: classify(r, want)}
	var hb wire.LeaseHeartbeatResponse
	if kind == check.LeaseRenew && o.Outcome == check.OK && json.Unmarshal(r.body, &hb) == nil {
		o.ExpiresAt, o.Wrote = hb.ExpiresAt, r.header.Get(wire.HeaderIndex) != ""
	}
	return c.record(o, t, call, r)
}

// reclaim reads the lease table and releases every lease granted under one of
// the given purposes; it returns the purposes still unaccounted for.
func (c *client) reclaim(ctx context.Context, purposes []string) []string {
	o := c.read(ctx, c.target(), check.LeaseRead)
	if o.Outcome != check.OK {
		return purposes
	}
	want := map[string]bool{}
	for _, p := range purposes {
		want[p] = true
	}
	for _, l := range o.Leases {
		if want[l.Purpose] {
			short := l.TTLMs < LongLeaseTTL.Milliseconds()
			c.release(ctx, held{port: l.Port, leaseID: l.LeaseID, ttl: time.Duration(l.TTLMs) * time.Millisecond, short: short})
		}
	}
	// Anything not listed now was never granted, or was granted and has
	// expired; either way the band is not held by it any longer. A purpose
	// granted later than this read is caught by the checker, not here.
	return nil
}

// resources registers, heartbeats and deletes resources drawn from a small
// shared set of ids.
func (c *client) resources(ctx context.Context) {
	ids := ResourceIDs()
	for ctx.Err() == nil {
		c.seq++
		id := ids[c.rng.IntN(len(ids))]
		t := c.target()
		call := c.w.Rec.Now()
		var r response
		o := check.Op{ResID: id}
		switch p := c.rng.IntN(10); {
		case p < 4:
			o.Kind, o.Value = check.ResRegister, fmt.Sprintf("c%d-%d", c.id, c.seq)
			w, _ := json.Marshal(o.Value)
			kind, machine, endpoint := "instance", "chaos-host", "http://chaos-host.invalid:8080"
			if id[0] == 'm' {
				kind, machine, endpoint = "machine", id[len("machine:"):], ""
			}
			body := wire.RegisterRequest{ID: id, Kind: kind, Name: id, Machine: machine, Owner: "", Endpoint: endpoint,
				Attrs:      map[string]json.RawMessage{check.AttrWrite: w, check.AttrHeartbeat: json.RawMessage(`""`)},
				ObservedAt: time.Now().UnixMilli(), TTLMs: ResourceTTL.Milliseconds()}
			r = c.do(ctx, t, http.MethodPost, "/v1/resources/register", body, writeTimeout, nil)
			o.Outcome = classify(r, http.StatusOK)
		case p < 8:
			o.Kind, o.Value = check.ResHeartbeat, fmt.Sprintf("c%d-%d", c.id, c.seq)
			hb, _ := json.Marshal(o.Value)
			body := wire.HeartbeatRequest{Attrs: map[string]json.RawMessage{check.AttrHeartbeat: hb}}
			r = c.do(ctx, t, http.MethodPost, "/v1/resources/"+encodeID(id)+"/heartbeat", body, writeTimeout, nil)
			o.Outcome = classify(r, http.StatusOK)
		default:
			o.Kind = check.ResDelete
			r = c.do(ctx, t, http.MethodDelete, "/v1/resources/"+encodeID(id), nil, writeTimeout, nil)
			o.Outcome = classify(r, http.StatusNoContent)
		}
		c.record(o, t, call, r)
		c.pause(ctx, c.w.cfg.Pace)
	}
}

// readKinds are the reads a client makes: consistent reads of both tables and
// /v1/primary polls.
var readKinds = []check.Kind{check.LeaseRead, check.ResRead, check.PrimaryPoll}

// readPaths are where each of readKinds GETs.
var readPaths = map[check.Kind]string{
	check.LeaseRead:   "/v1/leases/port?consistent=true",
	check.ResRead:     "/v1/resources?consistent=true",
	check.PrimaryPoll: "/v1/primary",
}

// reads alternates consistent reads of both tables with /v1/primary polls.
func (c *client) reads(ctx context.Context) {
	for ctx.Err() == nil {
		c.read(ctx, c.target(), readKinds[c.rng.IntN(len(readKinds))])
		c.pause(ctx, 2*c.w.cfg.Pace)
	}
}

// read makes one read of the given kind (one of readKinds) through node t and
// records it. It is OK when the node answers 200 with a body that decodes; a
// table read then carries the answer's generation and the workload's own rows,
// a primary poll what /v1/primary said.
func (c *client) read(ctx context.Context, t int, kind check.Kind) check.Op {
	call := c.w.Rec.Now()
	r := c.do(ctx, t, http.MethodGet, readPaths[kind], nil, readTimeout, nil)
	o := check.Op{Kind: kind, Outcome: check.Failed}
	var p wire.Primary
	into := map[check.Kind]any{check.LeaseRead: &o.Leases, check.ResRead: &o.Resources, check.PrimaryPoll: &p}[kind]
	if r.status != http.StatusOK || r.err != nil || json.Unmarshal(r.body, into) != nil {
		return c.record(o, t, call, r)
	}
	o.Outcome, o.Generation = check.OK, genOf(r.header)
	switch kind {
	case check.LeaseRead:
		o.Leases = c.w.ownLeases(o.Leases)
	case check.ResRead:
		o.Resources = c.w.ownResources(o.Resources)
	default:
		o.Known, o.Generation, o.Holder = p.Known, p.Generation, p.Holder
	}
	return c.record(o, t, call, r)
}
