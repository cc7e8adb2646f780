package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
)

func TestCadence_Rate(t *testing.T) {
	tests := []struct {
		c        cadence
		perCycle int
		rate     float64
	}{
		// 100,000 records of the fill are 50,000 members of a machine and
		// an instance each; with one lease each they send 3,500 requests/s.
		{cadence{members: 50_000, leases: 1}, 21, 3500},
		{cadence{members: 100_000, leases: 0}, 11, 100_000 * 11 / 300.0},
		{cadence{members: 3, leases: 2}, 31, 0.31},
	}
	for _, tt := range tests {
		if got := tt.c.perCycle(); got != tt.perCycle {
			t.Errorf("%+v.perCycle() = %d, want %d", tt.c, got, tt.perCycle)
		}
		if got := tt.c.rate(); got < tt.rate*0.9999 || got > tt.rate*1.0001 {
			t.Errorf("%+v.rate() = %v, want %v", tt.c, got, tt.rate)
		}
	}
}

// TestCadence_Event checks that over one cycle every member sends what the
// seed's member sends in 300 s, and that the kinds are mixed over any short
// stretch rather than run in blocks.
func TestCadence_Event(t *testing.T) {
	for _, c := range []cadence{{members: 7, leases: 1}, {members: 50, leases: 2}, {members: 4, leases: 0}} {
		type count struct{ load, instance int }
		per := map[int]*count{}
		leases := map[[2]int]int{}
		for k := range c.members * c.perCycle() {
			ev := c.event(k)
			if ev.member != k%c.members {
				t.Fatalf("%+v.event(%d) is member %d's, want %d's", c, k, ev.member, k%c.members)
			}
			if per[ev.member] == nil {
				per[ev.member] = &count{}
			}
			switch ev.kind {
			case eventLoad:
				per[ev.member].load++
			case eventInstance:
				per[ev.member].instance++
			case eventLease:
				if ev.lease < 0 || ev.lease >= c.leases {
					t.Fatalf("%+v.event(%d) renews lease %d of %d", c, k, ev.lease, c.leases)
				}
				leases[[2]int{ev.member, ev.lease}]++
			}
		}
		for m := range c.members {
			if got := per[m]; got == nil || got.load != seedRefreshBeats || got.instance != 1 {
				t.Errorf("%+v: member %d sent %+v in a cycle, want 10 loads and 1 instance heartbeat", c, m, got)
			}
			for j := range c.leases {
				if got := leases[[2]int{m, j}]; got != seedRefreshBeats {
					t.Errorf("%+v: member %d renewed lease %d %d times in a cycle, want 10", c, m, j, got)
				}
			}
		}
	}
	// With many members, a stretch of 100 requests holds about the
	// cycle's share of loads (10 of 21), not a block of one kind.
	c := cadence{members: 50_000, leases: 1}
	for start := 0; start < 200_000; start += 12_345 {
		loads := 0
		for k := start; k < start+100; k++ {
			if c.event(k).kind == eventLoad {
				loads++
			}
		}
		if loads < 35 || loads > 60 {
			t.Errorf("requests %d..%d: %d loads of 100, want about 48", start, start+99, loads)
		}
	}
	mix := c.mixOf(c.members * c.perCycle())
	if mix[eventLoad.String()] != 500_000 || mix[eventInstance.String()] != 50_000 || mix[eventLease.String()] != 500_000 {
		t.Errorf("mixOf one cycle = %v", mix)
	}
}

func TestPrimeOpen(t *testing.T) {
	c := cadence{members: 5, leases: 2}
	const held = 3 // the renewals of 10 member leases spread over 3 held ones
	key := func(ev openEvent) (string, bool) {
		switch ev.kind {
		case eventInstance:
			return "instance " + strconv.Itoa(ev.member), true
		case eventLease:
			return "lease " + strconv.Itoa((ev.member*c.leases+ev.lease)%held), true
		}
		return "", false
	}
	total := c.members * c.perCycle()
	sent := make(chan int, total)
	n, err := primeOpen(context.Background(), c, total, 4, key, func(_ context.Context, _, k int) error {
		sent <- k
		return nil
	})
	close(sent)
	if err != nil || n != c.members+held {
		t.Fatalf("primeOpen = %d, %v; want %d (each instance and each held lease once)", n, err, c.members+held)
	}
	seen := map[string]bool{}
	for k := range sent {
		rec, renewal := key(c.event(k))
		if !renewal || seen[rec] {
			t.Errorf("primeOpen sent request %d (%q, renewal %v) twice or as a load", k, rec, renewal)
		}
		seen[rec] = true
	}
	if _, err := primeOpen(context.Background(), c, total, 2, key, func(context.Context, int, int) error { return errors.New("refused") }); err == nil {
		t.Errorf("primeOpen with a refusing server = nil error")
	}
}

func TestOpenMembersPop(t *testing.T) {
	fill := openMembersPop{shape: shapeInstance}
	if got := []string{fill.machineID(3), fill.instanceID(3)}; !slices.Equal(got, []string{fillShape(shapeInstance).id(6), fillShape(shapeInstance).id(7)}) {
		t.Errorf("fill population of member 3 = %q", got)
	}
	own := openMembersPop{own: true}
	for r, want := range map[int]struct{ id, kind string }{4: {"machine:open-2", "machine"}, 5: {"instance:open-2/0", "instance"}} {
		var req struct {
			ID    string                     `json:"id"`
			Kind  string                     `json:"kind"`
			TTLMs int64                      `json:"ttlMs"`
			Attrs map[string]json.RawMessage `json:"attrs"`
		}
		if err := json.Unmarshal(own.ownRegister(r), &req); err != nil {
			t.Fatal(err)
		}
		if req.ID != want.id || req.Kind != want.kind || req.TTLMs != seedTTLMs || (want.kind == "machine") != (req.Attrs["load"] != nil) {
			t.Errorf("ownRegister(%d) = %+v, want id %s kind %s with the seed's TTL (and a load on the machine)", r, req, want.id, want.kind)
		}
	}
	var body struct {
		Attrs struct {
			Load json.RawMessage `json:"load"`
		} `json:"attrs"`
	}
	a, b := loadBeat(1, 1), loadBeat(1, 2)
	if err := json.Unmarshal(a, &body); err != nil || len(body.Attrs.Load) == 0 || string(a) == string(b) {
		t.Errorf("loadBeat(1, 1) = %s, %v; loadBeat(1, 2) = %s: want a load attr, new on every beat", a, err, b)
	}
}
