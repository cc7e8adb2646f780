package fsm

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// describe renders an Apply result for comparison across replicas.
func describe(res interface{}) string {
	if err, ok := res.(error); ok {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%T %s", res, jsonOf(res))
}

// replay applies the same entries to two fresh FSMs, checking that every
// result and every intermediate Hash agree. Go randomizes map iteration on
// every range, so two replicas in one process already walk their maps in
// different orders.
func replay(t *testing.T, entries []*raft.Log) (a, b *FSM) {
	t.Helper()
	a, b = New(), New()
	for i, e := range entries {
		ra, rb := a.Apply(e), b.Apply(e)
		if da, db := describe(ra), describe(rb); da != db {
			t.Fatalf("entry %d: Apply() = %s on one replica, %s on the other", i, da, db)
		}
		if ha, hb := a.Hash(), b.Hash(); ha != hb {
			t.Fatalf("entry %d: Hash() = %s and %s, want equal", i, ha, hb)
		}
	}
	return a, b
}

func TestFSM_ApplyDeterministic(t *testing.T) {
	h := newHarness(t)
	var entries []*raft.Log
	add := func(cmd Command) { entries = append(entries, h.entry(cmd)) }
	add(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	for _, cmd := range sampleCommands() {
		add(cmd)
	}
	for i := range 30 {
		now := t0 + int64(i)*700
		add(registerCmd(now, memberCaller, fmt.Sprintf("instance:mbp/%d", i), "mbp"))
		c := acquireCmd(now, memberCaller, fmt.Sprintf("lease-%d", i))
		c.TTLMs = int64(1000 * (i%4 + 1))
		add(c)
		if i%7 == 0 {
			h.term++
			add(ClaimPrimary{Header: Header{Now: now - hour}, Holder: "node-b", GraceMs: 500})
		}
		add(Sweep{Header: Header{Now: now + 2000}})
	}
	a, b := replay(t, entries)
	if a.Hash() == New().Hash() {
		t.Fatalf("Hash() equals the empty state's: the sequence did nothing")
	}
	// A third replica that catches up from a snapshot agrees too.
	c := New()
	if err := restore(t, c, persist(t, a)); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if c.Hash() != b.Hash() {
		t.Errorf("Hash() after restore = %s, want %s", c.Hash(), b.Hash())
	}
}

// randomLog draws a log of n entries: every command type with valid and
// invalid fields, clocks that jump back, claims at new terms with skewed
// clocks, malformed bodies and skippable entries. The peek FSM lets renewals
// and releases name leases that exist.
type randomLog struct {
	rng  *rand.Rand
	h    *harness
	now  int64
	peek *FSM
}

func (g *randomLog) pick(n int) int { return g.rng.IntN(n) }

func (g *randomLog) caller() Caller {
	return []Caller{adminCaller, memberCaller, otherCaller, mbpCaller, studioCaller}[g.pick(5)]
}

func (g *randomLog) machine() string { return []string{"mbp", "studio", "mbp", "__proto__"}[g.pick(4)] }

func (g *randomLog) id() string {
	return []string{"machine:mbp", "machine:studio", "instance:mbp/1", "instance:studio/2", ""}[g.pick(5)]
}

func (g *randomLog) ttl() int64 {
	return []int64{1, 500, 2000, 10_000, 600_000, 48 * hour, 0, -5}[g.pick(8)]
}

func (g *randomLog) leaseID() string { return fmt.Sprintf("lease-%d", g.pick(6)) }

func (g *randomLog) command() Command {
	// Time mostly moves forward, sometimes back (the clamp), never far.
	g.now += int64(g.pick(4000))
	now := g.now
	if g.pick(10) == 0 {
		now -= int64(g.pick(8000))
	}
	var raw map[string]json.RawMessage
	for range g.pick(3) {
		if raw == nil {
			raw = map[string]json.RawMessage{}
		}
		raw[[]string{"load", "seats", "duties"}[g.pick(3)]] = fmt.Appendf(nil, "%d", g.pick(100))
	}
	switch g.pick(11) {
	case 0, 1:
		c := RegisterResource{Header: Header{Now: now}, Caller: g.caller(), ID: g.id(), Kind: "machine", Name: "n", Machine: g.machine(),
			Attrs: raw, ObservedAt: now, TTLMs: g.ttl()}
		if c.TTLMs > wire.MaxResourceTTLMs {
			c.TTLMs = wire.MaxResourceTTLMs
		}
		return c
	case 2:
		return HeartbeatResource{Header: Header{Now: now}, Caller: g.caller(), ID: g.id(), Attrs: raw}
	case 3:
		return DeleteResource{Header: Header{Now: now}, Caller: g.caller(), ID: g.id()}
	case 4, 5:
		c := AcquireLease{Header: Header{Now: now}, Caller: g.caller(), LeaseID: g.leaseID(), Machine: g.machine(), Purpose: "p",
			TTLMs: g.ttl(), BandStart: 31450, BandEnd: 31457}
		if g.pick(4) == 0 {
			c.Excluded = []int{31450 + g.pick(10)}
		}
		c.IdempotencyKey = []string{"", "", "k1", "k2"}[g.pick(4)]
		return c
	case 6, 7:
		port := 31450 + g.pick(9)
		leaseID := g.leaseID()
		caller := g.caller()
		if l, ok := g.peek.Lease(port); ok && g.pick(2) == 0 {
			leaseID = l.LeaseID
			if g.pick(3) > 0 {
				caller = Caller{Owner: l.Owner}
			}
		}
		if g.pick(2) == 0 {
			return RenewLease{Header: Header{Now: now}, Caller: caller, Port: port, LeaseID: leaseID}
		}
		return ReleaseLease{Header: Header{Now: now}, Caller: caller, Port: port, LeaseID: leaseID}
	case 8:
		if g.pick(3) == 0 {
			return RevokeToken{Header: Header{Now: now}, Machine: g.machine()}
		}
		return IssueToken{Header: Header{Now: now}, Machine: g.machine(), SHA256: sumHex(fmt.Sprint(g.pick(4)))}
	case 9:
		if g.pick(3) == 0 {
			g.h.term++
		}
		skew := int64(g.pick(4*int(hour))) - 2*hour
		g.now += skew
		if g.pick(8) == 0 {
			return ClaimPrimary{Header: Header{Now: g.now}, Holder: "Not A Candidate", GraceMs: 1000}
		}
		return ClaimPrimary{Header: Header{Now: g.now}, Holder: []string{"node-a", "node-b", "node-c"}[g.pick(3)], GraceMs: int64(g.pick(2000))}
	default:
		return Sweep{Header: Header{Now: now}}
	}
}

// batchOrCommand sometimes wraps a few commands (a claim or sweep stays
// alone) into a batch, as the leader's group commit does, and sometimes
// raises the format level.
func (g *randomLog) batchOrCommand() Command {
	switch g.pick(12) {
	case 0:
		return SetFormat{Header: Header{Now: g.now}, Level: 1 + g.pick(MaxFormat+1)}
	case 1, 2:
		var cmds []Command
		acquired := false
		for range 1 + g.pick(5) {
			c := g.command()
			if batchable(commandTable, c.Type()) != nil || (acquired && c.Type() == AcquireLeaseType) {
				continue
			}
			acquired = acquired || c.Type() == AcquireLeaseType
			cmds = append(cmds, c)
		}
		b, err := NewBatch(g.now, cmds)
		if err != nil {
			panic(err)
		}
		return b
	}
	return g.command()
}

func (g *randomLog) entry() *raft.Log {
	switch g.pick(40) {
	case 0: // malformed body of a known type
		return g.h.rawEntry(append([]byte{byte(1 + g.pick(10))}, `{"now":`...))
	case 1: // a future type a newer version marked skippable
		return g.h.rawEntry([]byte("\x9f{\"whatever\":1}"))
	}
	return g.h.entry(g.batchOrCommand())
}

func TestFSM_ApplyDeterministicRandom(t *testing.T) {
	for seed := range uint64(25) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			g := &randomLog{rng: rand.New(rand.NewPCG(seed, 0x5eed)), h: newHarness(t), now: t0, peek: New()}
			var entries []*raft.Log
			successes := 0
			for range 400 {
				e := g.entry()
				if _, ok := g.peek.Apply(e).(error); !ok {
					successes++
				}
				checkIndexes(t, g.peek, fmt.Sprintf("after entry %d", e.Index))
				entries = append(entries, e)
			}
			if successes < 100 {
				t.Fatalf("only %d of %d entries succeeded: the generator is too hostile to test much", successes, len(entries))
			}
			a, b := replay(t, entries)
			if a.Hash() != g.peek.Hash() {
				t.Fatalf("Hash() = %s, the generating replica has %s", a.Hash(), g.peek.Hash())
			}
			c := New()
			if err := restore(t, c, persist(t, b)); err != nil {
				t.Fatalf("Restore() error = %v", err)
			}
			if c.Hash() != a.Hash() {
				t.Errorf("Hash() after restore = %s, want %s", c.Hash(), a.Hash())
			}
		})
	}
}
