package check

import (
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// wall0 is the wall clock (Unix ms) at the fabricated histories' time 0.
const wall0 = 1_800_000_000_000

var clk = Clock{WallStartMs: wall0, Skews: []time.Duration{0, -5 * time.Minute, 5 * time.Minute}}

const memberTTL = 4000 // ms

// member ops of renewal member 0's record, times in ms, expiresAt in
// cluster ms (wall0 + ms, plus the answering leader's skew).
func reg(call, ret, expiresAt int64, out Outcome) Op {
	return Op{Client: 2000, Kind: RenewRegister, Call: call * ms, Return: ret * ms, Outcome: out, Status: 200,
		ResID: RenewerID(0), TTLMs: memberTTL, ExpiresAt: expiresAt, Renewer: true}
}

func beat(call, ret, expiresAt int64, status int) Op {
	o := Op{Client: 2000, Kind: RenewHeartbeat, Call: call * ms, Return: ret * ms, Outcome: OK, Status: status,
		ResID: RenewerID(0), TTLMs: memberTTL, ExpiresAt: expiresAt, Renewer: true}
	if status != 200 {
		o.Outcome, o.ExpiresAt = Failed, 0
	}
	return o
}

func readRes(c int, call, ret int64, listed bool) Op {
	o := resRead(c, call, ret)
	if listed {
		o.Resources = []wire.Resource{{ID: RenewerID(0)}}
	}
	return o
}

// goodLife is a correct record's life: registered (expiry at +4 s), a
// written renewal with a second of slack, covered ones, a failover to a
// leader 5 minutes behind (rebased: remaining plus a second of grace), a
// covered renewal there, and a 404 only after the last expiresAt.
func goodLife() []Op {
	return []Op{
		reg(0, 10, wall0+4005, OK),
		beat(1000, 1010, wall0+1005+5000, 200),        // written: now + T + slack
		beat(1500, 1510, wall0+1005+5000, 200),        // covered
		readRes(5, 1600, 1650, true),                  // seen live
		beat(2500, 2600, wall0+6005+1000-300000, 200), // new leader at −5 min: rebased with grace
		readRes(5, 6900, 6950, true),
		beat(9000, 9010, 0, 404), // after 7.005 s: expired through the sweep
		readRes(5, 9100, 9150, false),
		reg(9200, 9210, wall0+13205, OK), // a new life
		beat(9800, 9810, wall0+9805+5000, 200),
	}
}

func TestCheckRenewals_CorrectLifePasses(t *testing.T) {
	if v := CheckRenewals(goodLife(), clk); len(v) != 0 {
		t.Errorf("CheckRenewals(correct life) = %v, want none", v)
	}
}

// Histories that break one promise each are caught, with the kind named.
func TestCheckRenewals_CatchesBrokenPromises(t *testing.T) {
	cases := []struct {
		name string
		mend func(h []Op) []Op
		want string
	}{
		{"404 before send + TTL", func(h []Op) []Op {
			return append(h[:4], beat(4000, 4010, 0, 404)) // 1.5 s + 4 s promised
		}, "renewal-expired-early"},
		{"read misses the record before send + TTL", func(h []Op) []Op {
			return append(h[:4], readRes(6, 4000, 4050, false))
		}, "renewal-expired-early"},
		{"gone after send + TTL but before the answered expiresAt", func(h []Op) []Op {
			return append(h[:4], beat(5800, 5810, 0, 404)) // 1.5 + 4 = 5.5 s, expiresAt at 6.005 s
		}, "renewal-expired-before-expiresAt"},
		{"a follower answers less than send + TTL", func(h []Op) []Op {
			h[1].ExpiresAt = wall0 + 1000 + 4000 - 200 // judged at a time 200 ms stale
			return h
		}, "renewal-answer-short"},
		{"a later answer promises less", func(h []Op) []Op {
			h[2].ExpiresAt = wall0 + 5600 // above send + TTL (5.5 s), below the 6.005 s already answered
			return h
		}, "renewal-answer-regressed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.mend(goodLife())
			if got := kinds(CheckRenewals(h, clk)); got != tc.want {
				t.Errorf("CheckRenewals = %q, want %q", got, tc.want)
			}
		})
	}
}

// A register whose outcome is unknown may land later and lower expiresAt
// legitimately: the expiresAt checks skip the lives after it, the send-time
// rule still holds.
func TestCheckRenewals_IndeterminateRegister(t *testing.T) {
	h := []Op{
		reg(0, 1000, 0, Indeterminate),
		reg(1100, 1110, wall0+5105, OK),
		beat(1500, 1510, wall0+1505+5000, 200),
		beat(6000, 6010, 0, 404), // after send + TTL (5.5 s), before the answered 6.505 s
	}
	if v := CheckRenewals(h, clk); len(v) != 0 {
		t.Errorf("CheckRenewals(after an indeterminate register) = %v, want none", v)
	}
	h[3] = beat(5000, 5010, 0, 404)
	if got := kinds(CheckRenewals(h, clk)); got != "renewal-expired-early" {
		t.Errorf("CheckRenewals(404 before send + TTL) = %q, want renewal-expired-early", got)
	}
}

// A lease's port granted to another lease while its holder's promise runs is
// an early expiry; after it, it is not.
func TestCheckRenewals_LeasePortRegranted(t *testing.T) {
	a := acquire(0, 0, 10, 31450, "lease-a")
	a.Short, a.TTLMs, a.ExpiresAt = true, memberTTL, wall0+4005
	r := renew(0, 1000, 1010, 31450, "lease-a", OK, 200)
	r.Short, r.TTLMs, r.ExpiresAt = true, memberTTL, wall0+1005+5000
	for _, tc := range []struct {
		at   int64
		want string
	}{
		{4500, "renewal-expired-early"},            // before send + TTL (5 s)
		{5600, "renewal-expired-before-expiresAt"}, // before the answered expiry (6.005 s)
		{6100, ""},
	} {
		b := acquire(1, tc.at, tc.at+10, 31450, "lease-b")
		if got := kinds(CheckRenewals([]Op{a, r, b}, clk)); got != tc.want {
			t.Errorf("CheckRenewals(port regranted at %d ms) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

// A 24 h lease renewed with its 5-minute slack cap in a run whose offsets are
// 5 minutes apart cannot be told apart from a covered answer of a leader 5
// minutes ahead: it is held to the send-time rule only, and passes.
func TestCheckRenewals_LongTTLUnderOffsets(t *testing.T) {
	const day = 86_400_000
	a := acquire(0, 0, 10, 31450, "lease-a")
	a.TTLMs, a.ExpiresAt = day, wall0+5+day
	r := renew(0, 1000, 1010, 31450, "lease-a", OK, 200)
	r.ExpiresAt = wall0 + 1005 + day + 300_000
	late := renew(0, 1300, 1310, 31450, "lease-a", OK, 200) // covered: the same expiresAt
	late.ExpiresAt = r.ExpiresAt
	if v := CheckRenewals([]Op{a, r, late}, clk); len(v) != 0 {
		t.Errorf("CheckRenewals(24 h lease under 5-minute offsets) = %v, want none", v)
	}
	gone := renew(0, 2000, 2010, 31450, "lease-a", Failed, 404)
	if got := kinds(CheckRenewals([]Op{a, r, late, gone}, clk)); got != "renewal-expired-early" {
		t.Errorf("CheckRenewals(24 h lease gone after 2 s) = %q, want renewal-expired-early", got)
	}
}

func TestSummarizeRenewals(t *testing.T) {
	got := SummarizeRenewals(goodLife(), clk)
	// Two lives: the first with four answers, the latest promising until
	// 2.5 s + 4 s, seen gone twice, first by the 404 that returned at
	// 9.01 s; the second with two answers.
	want := RenewalSummary{Lives: 2, Answers: 6, Mapped: 6, Gone: 2, ClosestMs: 9010 - 6500}
	if got != want {
		t.Errorf("SummarizeRenewals(goodLife) = %+v, want %+v", got, want)
	}
}
