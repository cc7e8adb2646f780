package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/wire"
)

// Renewal members (ARCHITECTURE.md, "Renewals"): each holds one instance
// record (check.RenewerID) and one port lease on RenewTTL, each kept in a loop
// of its own through random candidates, leader or follower, including one
// that is paused or cut off. Most renewals come a sixteenth of the TTL after
// the last one, inside the slack, so the state covers them and nothing is
// written; one in five waits until just before the client's deadline (send
// time of the last acknowledged renewal + TTL), so the faults meet members
// whose promise is about to run out. A record's heartbeat sends no attrs,
// or (one in five) its stored load again, both pure renewals, or (one in
// twenty) a new load, a write. Every answer is recorded with its
// expiresAt and whether it was written, for check.CheckRenewals.

// renewerClient is the client id of the first renewal member's record loop;
// member i uses renewerClient+2i for its record and renewerClient+2i+1 for
// its lease (one client's operations never overlap).
const renewerClient = 2000

// renewTimeout is a renewal member's request timeout: the TypeScript
// client's for lease heartbeats, for both kinds.
const renewTimeout = time.Second

// renewLoad is the attr a renewal member publishes; most heartbeats send
// none, some the stored value (a pure renewal too), a few a new one (a write).
const renewLoad = "load"

func (w *Workload) runRenewers(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Renewers; i++ {
		for j, loop := range []func(*client, context.Context, int){(*client).renewRecord, (*client).renewLease} {
			id := renewerClient + 2*i + j
			c := &client{w: w, id: id, rng: rand.New(rand.NewPCG(w.cfg.Seed, uint64(id))), renewer: true}
			wg.Go(func() {
				for ctx.Err() == nil {
					loop(c, ctx, i)
				}
			})
		}
	}
	wg.Wait()
}

// renewGap is the pause after an acknowledged renewal sent at sent: mostly
// 1/16 of the TTL (±30 %), so a written renewal's slack of a quarter TTL
// covers the next few, and one time in five until 1.5 timeouts (at most
// 3/8 of the TTL) before the client's deadline sent + TTL.
func (c *client) renewGap(sent int64) time.Duration {
	ttl := c.w.cfg.RenewTTL
	due := time.Duration(sent) + ttl/16 + time.Duration(c.rng.Int64N(int64(ttl/16*6/10)+1)) - ttl/16*3/10
	if c.rng.IntN(5) == 0 {
		due = time.Duration(sent) + ttl - min(renewTimeout*3/2, ttl*3/8)
	}
	return max(due-time.Duration(c.w.Rec.Now()), 0)
}

// keep renews through renew until ctx ends or renew reports the record gone;
// sent is the send time of the acknowledged answer that began its life. A
// renewal without an answer is retried every 100 ms.
func (c *client) keep(ctx context.Context, sent int64, renew func() check.Op) {
	for ctx.Err() == nil {
		if !c.sleep(ctx, c.renewGap(sent)) {
			return
		}
		for ctx.Err() == nil {
			o := renew()
			if o.Outcome == check.OK {
				sent = o.Call
				break
			}
			if o.Status == http.StatusNotFound || o.Status == http.StatusConflict {
				return
			}
			if !c.sleep(ctx, 100*time.Millisecond) {
				return
			}
		}
	}
}

// sleep waits d or until ctx is done; it reports whether the full time passed.
func (c *client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// renewRecord registers member i's record and heartbeats it until it is
// lost (404) or the run ends.
func (c *client) renewRecord(ctx context.Context, i int) {
	c.seq++
	id, machine := check.RenewerID(i), check.RenewerMachine(i)
	load := fmt.Sprintf("%d", c.seq)
	t := c.target()
	call := c.w.Rec.Now()
	body := wire.RegisterRequest{ID: id, Kind: "instance", Name: id, Machine: machine, Endpoint: "http://chaos-renew.invalid:8080",
		Attrs: map[string]json.RawMessage{renewLoad: jsonString(load)}, ObservedAt: time.Now().UnixMilli(), TTLMs: c.w.cfg.RenewTTL.Milliseconds()}
	r := c.do(ctx, t, http.MethodPost, "/v1/resources/register", body, renewTimeout, nil)
	o := check.Op{Kind: check.RenewRegister, ResID: id, Value: load, TTLMs: body.TTLMs, Outcome: classify(r, http.StatusOK)}
	var res wire.Resource
	if o.Outcome == check.OK && json.Unmarshal(r.body, &res) == nil {
		o.ExpiresAt = res.ExpiresAt
	}
	o = c.record(o, t, call, r)
	if o.Outcome != check.OK {
		c.sleep(ctx, 100*time.Millisecond)
		return
	}
	c.keep(ctx, o.Call, func() check.Op {
		var attrs map[string]json.RawMessage
		switch p := c.rng.IntN(20); {
		case p == 0:
			c.seq++
			load = fmt.Sprintf("%d", c.seq)
			attrs = map[string]json.RawMessage{renewLoad: jsonString(load)}
		case p < 5:
			attrs = map[string]json.RawMessage{renewLoad: jsonString(load)}
		}
		t := c.target()
		call := c.w.Rec.Now()
		var body any
		if attrs != nil {
			body = wire.HeartbeatRequest{Attrs: attrs}
		}
		r := c.do(ctx, t, http.MethodPost, "/v1/resources/"+encodeID(id)+"/heartbeat", body, renewTimeout, nil)
		o := check.Op{Kind: check.RenewHeartbeat, ResID: id, Value: load, TTLMs: c.w.cfg.RenewTTL.Milliseconds(),
			Outcome: classify(r, http.StatusOK)}
		var hb wire.HeartbeatResponse
		if o.Outcome == check.OK && json.Unmarshal(r.body, &hb) == nil {
			o.ExpiresAt, o.Wrote = hb.ExpiresAt, r.header.Get(wire.HeaderIndex) != ""
		}
		return c.record(o, t, call, r)
	})
}

// renewLease acquires a lease for member i (an unknown outcome is retried
// under the same Idempotency-Key until answered) and renews it until it is
// lost or the run ends.
func (c *client) renewLease(ctx context.Context, i int) {
	c.seq++
	purpose := fmt.Sprintf("renew-%d-%d", i, c.seq)
	ttl := c.w.cfg.RenewTTL
	var o check.Op
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		o = c.acquireAs(ctx, check.RenewerMachine(i), purpose, ttl, true)
		if o.Outcome != check.Indeterminate {
			break
		}
		c.sleep(ctx, 100*time.Millisecond)
	}
	if o.Outcome != check.OK {
		c.sleep(ctx, 200*time.Millisecond)
		return
	}
	h := held{port: o.Port, leaseID: o.LeaseID, ttl: ttl, short: true}
	c.keep(ctx, o.Call, func() check.Op {
		return c.renew(ctx, h)
	})
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
