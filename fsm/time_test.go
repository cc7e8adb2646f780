package fsm

import (
	"reflect"
	"testing"
)

const hour int64 = 3_600_000

// TestFSM_ApplyClaimPrimaryRebase checks the issue's demand: "a claim by a
// leader whose clock is an hour ahead or behind keeps every remaining TTL".
func TestFSM_ApplyClaimPrimaryRebase(t *testing.T) {
	const grace int64 = 1000
	lastNow := t0 + 5000
	tests := []struct {
		name string
		skew int64
	}{
		{name: "clock an hour ahead", skew: hour},
		{name: "clock an hour behind", skew: -hour},
		{name: "same clock", skew: 0},
		{name: "clock a day behind", skew: -24 * hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.term = 2
			h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: grace})
			for _, r := range []struct {
				id  string
				ttl int64
			}{
				{"machine:long", 600_000},   // remaining 595 000
				{"machine:mid", 10_000},     // remaining 5 000
				{"machine:tight", 5001},     // remaining 1
				{"machine:edge", 5000},      // remaining 0: due
				{"machine:overdue", 1000},   // remaining −4 000: due
				{"instance:x/1", 3_600_000}, // remaining an hour minus 5 s
			} {
				c := registerCmd(t0, memberCaller, r.id, "mbp")
				c.TTLMs = r.ttl
				h.mustApply(c)
			}
			for _, ttl := range []int64{30_000, 48 * hour, 2000, 5000} {
				c := acquireCmd(t0, memberCaller, "lease")
				c.TTLMs = ttl
				h.mustApply(c)
			}
			// Time moves through any applied command, not only sweeps.
			h.mustApply(IssueToken{Header: Header{Now: lastNow}, Machine: "mbp", SHA256: tokenSumOne})
			if got := h.f.LastNow(); got != lastNow {
				t.Fatalf("LastNow() = %d, want %d", got, lastNow)
			}
			remaining := map[string]int64{}
			for _, r := range h.f.Resources("", "") {
				remaining[r.ID] = r.ExpiresAt - lastNow
			}
			leaseRemaining := map[int]int64{}
			for _, l := range h.f.Leases() {
				leaseRemaining[l.Port] = l.ExpiresAt - lastNow
			}

			h.term = 3
			claimNow := lastNow + tt.skew
			p := mustResult[Primary](h, ClaimPrimary{Header: Header{Now: claimNow}, Holder: "node-b", GraceMs: grace})
			claimIndex := h.index
			if want := (Primary{Holder: "node-b", Generation: 3, ClaimedAt: claimNow, Index: claimIndex}); p != want || h.f.Primary() != want {
				t.Fatalf("Apply() = %+v, Primary() = %+v, want %+v", p, h.f.Primary(), want)
			}
			if got := h.f.LastNow(); got != claimNow {
				t.Errorf("LastNow() = %d, want %d", got, claimNow)
			}
			for _, table := range []Table{TableResources, TableLeases, TablePrimary} {
				if got := h.f.Index(table); got != claimIndex {
					t.Errorf("Index(%d) = %d, want the claim's index %d", table, got, claimIndex)
				}
			}

			wantExpires := func(rem int64) int64 {
				if rem > 0 {
					return claimNow + rem + grace
				}
				return claimNow
			}
			var dueIDs []string
			for _, r := range h.f.Resources("", "") {
				rem := remaining[r.ID]
				if r.ExpiresAt != wantExpires(rem) {
					t.Errorf("%s: expiresAt − claim.now = %d, want %d (remaining %d + grace %d, or 0 if due)",
						r.ID, r.ExpiresAt-claimNow, wantExpires(rem)-claimNow, rem, grace)
				}
				if rem <= 0 {
					dueIDs = append(dueIDs, r.ID)
				}
			}
			var duePorts []int
			for _, l := range h.f.Leases() {
				rem := leaseRemaining[l.Port]
				if l.ExpiresAt != wantExpires(rem) {
					t.Errorf("port %d: expiresAt − claim.now = %d, want %d", l.Port, l.ExpiresAt-claimNow, wantExpires(rem)-claimNow)
				}
				if rem <= 0 {
					duePorts = append(duePorts, l.Port)
				}
			}
			if want := []string{"machine:edge", "machine:overdue"}; !reflect.DeepEqual(dueIDs, want) {
				t.Fatalf("due resources = %v, want %v", dueIDs, want)
			}
			if want := []int{31452, 31453}; !reflect.DeepEqual(duePorts, want) {
				t.Fatalf("due leases = %v, want %v", duePorts, want)
			}

			// Due records stay until a Sweep, but are dead to their holders.
			if res := h.apply(HeartbeatResource{Header: Header{Now: claimNow}, Caller: memberCaller, ID: "machine:edge"}); !isErr(res, ErrNotFound) {
				t.Errorf("heartbeat on a due record: Apply() = %v, want %v", res, ErrNotFound)
			}
			if res := h.apply(RenewLease{Header: Header{Now: claimNow}, Caller: memberCaller, Port: 31452, LeaseID: "lease"}); !isErr(res, ErrNotFound) {
				t.Errorf("renew of a due lease: Apply() = %v, want %v", res, ErrNotFound)
			}
			if got := h.f.Counts(); got.Resources != 6 || got.Leases != 4 {
				t.Fatalf("Counts() before the sweep = %+v, want 6 resources, 4 leases", got)
			}
			// The tightest live record is still live at claim.now.
			h.mustApply(HeartbeatResource{Header: Header{Now: claimNow}, Caller: memberCaller, ID: "machine:tight"})

			res := mustResult[SweepResult](h, Sweep{Header: Header{Now: claimNow}})
			if want := (SweepResult{Resources: dueIDs, Leases: duePorts}); !reflect.DeepEqual(res, want) {
				t.Errorf("Sweep: Apply() = %+v, want %+v", res, want)
			}
			if got := h.f.Counts(); got.Resources != 4 || got.Leases != 2 {
				t.Errorf("Counts() after the sweep = %+v, want 4 resources, 2 leases", got)
			}
		})
	}
}

// Two failovers in a row, with opposite skews, add both graces and lose no
// remaining time.
func TestFSM_ApplyClaimPrimaryRebaseTwice(t *testing.T) {
	h := newHarness(t)
	h.baseline() // machine:base and the 31450 lease expire at t0+ttl; lastNow t0
	h.term = 4
	first := t0 + hour
	h.mustApply(ClaimPrimary{Header: Header{Now: first}, Holder: "node-b", GraceMs: 1000})
	h.term = 5
	second := t0 - hour
	h.mustApply(ClaimPrimary{Header: Header{Now: second}, Holder: "node-c", GraceMs: 2000})
	want := second + ttl + 1000 + 2000
	if r, _ := h.f.Resource("machine:base"); r.ExpiresAt != want {
		t.Errorf("resource expiresAt = %d, want %d (remaining + both graces)", r.ExpiresAt, want)
	}
	if l, _ := h.f.Lease(31450); l.ExpiresAt != want {
		t.Errorf("lease expiresAt = %d, want %d", l.ExpiresAt, want)
	}
	if p := h.f.Primary(); p.Generation != 5 || p.Holder != "node-c" {
		t.Errorf("Primary() = %+v, want node-c at generation 5", p)
	}
}

// "Nothing expires except through a committed Sweep."
func TestFSM_ApplyNothingExpiresWithoutSweep(t *testing.T) {
	h := newHarness(t)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	short := registerCmd(t0, memberCaller, "machine:short", "short")
	short.TTLMs = 1000
	h.mustApply(short)
	h.mustApply(registerCmd(t0, memberCaller, "machine:kept", "kept"))
	shortLease := acquireCmd(t0, memberCaller, "lease-short")
	shortLease.TTLMs = 1000
	h.mustApply(shortLease)                                 // 31450
	h.mustApply(acquireCmd(t0, memberCaller, "lease-kept")) // 31451

	now := t0 + 10_000
	for i := range 60 {
		now += 1000
		var cmd Command
		switch i % 6 {
		case 0:
			cmd = registerCmd(now, otherCaller, "instance:other/"+string(rune('a'+i/6)), "other")
		case 1:
			cmd = HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: "machine:kept", Attrs: attrs(`{"load":1}`)}
		case 2:
			cmd = RenewLease{Header: Header{Now: now}, Caller: memberCaller, Port: 31451, LeaseID: "lease-kept"}
		case 3:
			c := acquireCmd(now, otherCaller, "lease-other")
			c.Excluded = []int{31450} // acquiring 31450 would replace the expired lease
			cmd = c
		case 4:
			cmd = IssueToken{Header: Header{Now: now}, Machine: "other", SHA256: sumHex(string(rune('a' + i)))}
		case 5:
			cmd = HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: "machine:short"} // 404, but applied
		}
		h.apply(cmd)
		if _, ok := h.f.Resource("machine:short"); !ok {
			t.Fatalf("after %T at %d: machine:short gone without a Sweep", cmd, now)
		}
		if _, ok := h.f.Lease(31450); !ok {
			t.Fatalf("after %T at %d: lease 31450 gone without a Sweep", cmd, now)
		}
	}
	if got := h.f.LastNow(); got != now {
		t.Fatalf("LastNow() = %d, want %d", got, now)
	}
	if r, _ := h.f.Resource("machine:short"); r.ExpiresAt != t0+1000 {
		t.Errorf("machine:short expiresAt = %d, want %d (untouched)", r.ExpiresAt, t0+1000)
	}
	before := h.f.Counts()
	res := mustResult[SweepResult](h, Sweep{Header: Header{Now: now}})
	want := SweepResult{Resources: []string{"machine:short"}, Leases: []int{31450}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Sweep: Apply() = %+v, want %+v", res, want)
	}
	after := h.f.Counts()
	if after.Resources != before.Resources-1 || after.Leases != before.Leases-1 || after.Tokens != before.Tokens {
		t.Errorf("Counts() = %+v, want %+v minus one resource and one lease", after, before)
	}
}

// Within a generation a command stamped before lastNow is applied at lastNow.
func TestFSM_ApplyClampsNow(t *testing.T) {
	const late = t0 + 10_000 // lastNow after setup
	advance := func(h *harness) {
		h.mustApply(IssueToken{Header: Header{Now: late}, Machine: "clock", SHA256: sumHex("clock")})
	}
	cases := []applyCase{
		{
			name:  "acquire",
			setup: advance,
			cmd:   constant(acquireCmd(t0, memberCaller, "lease-1")),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.GrantedAt != late || l.RenewedAt != late || l.ExpiresAt != late+ttl {
					t.Errorf("Apply() granted %d renewed %d expires %d, want %d %d %d", l.GrantedAt, l.RenewedAt, l.ExpiresAt, late, late, late+ttl)
				}
				if got := h.f.LastNow(); got != late {
					t.Errorf("LastNow() = %d, want %d", got, late)
				}
			},
		},
		{
			name:  "register",
			setup: advance,
			cmd:   constant(registerCmd(t0+1, memberCaller, "machine:mbp", "mbp")),
			check: func(t *testing.T, h *harness, res interface{}) {
				r := res.(Resource)
				if r.RegisteredAt != late || r.RenewedAt != late || r.ExpiresAt != late+ttl {
					t.Errorf("Apply() registered %d renewed %d expires %d, want %d %d %d", r.RegisteredAt, r.RenewedAt, r.ExpiresAt, late, late, late+ttl)
				}
			},
		},
		{
			name:  "issue token",
			setup: advance,
			cmd:   constant(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(MemberToken).IssuedAt; got != "2023-11-14T22:13:30.000Z" {
					t.Errorf("Apply().IssuedAt = %s, want 2023-11-14T22:13:30.000Z", got)
				}
			},
		},
		{
			name: "sweep expires what is due at lastNow",
			setup: func(h *harness) {
				registerMbp(h, late-t0)
				advance(h)
			},
			cmd: constant(Sweep{Header: Header{Now: t0}}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(SweepResult).Resources; !reflect.DeepEqual(got, []string{"machine:mbp"}) {
					t.Errorf("Apply().Resources = %v, want [machine:mbp]", got)
				}
			},
		},
		{
			name: "renew stamped before expiry but applied after",
			setup: func(h *harness) {
				c := acquireCmd(t0, memberCaller, "lease-1")
				c.TTLMs = 5000
				h.mustApply(c)
				advance(h)
			},
			cmd:     constant(RenewLease{Header: Header{Now: t0 + 1000}, Caller: memberCaller, Port: 31451, LeaseID: "lease-1"}),
			wantErr: []error{ErrNotFound},
		},
		{
			name: "heartbeat stamped before expiry but applied after",
			setup: func(h *harness) {
				registerMbp(h, 5000)
				advance(h)
			},
			cmd:     constant(HeartbeatResource{Header: Header{Now: t0 + 1000}, Caller: memberCaller, ID: "machine:mbp"}),
			wantErr: []error{ErrNotFound},
		},
	}
	runApplyCases(t, cases)
}
