package check

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Clock maps the cluster time of an answered expiresAt onto the history's
// monotonic clock. The nodes run on the harness's machine, so a leader's
// cluster time is the machine's wall clock read when it won its election,
// plus the chaos clock offset that node had then, carried on by the monotonic
// clock (ARCHITECTURE.md, "Time model"): wall(t) + skew for the whole term.
type Clock struct {
	// WallStartMs is the wall clock (Unix ms) at the history's time 0.
	WallStartMs int64
	// Skews are the clock offsets the scenario gave any node (0 is always
	// one). An answer's expiresAt − wall(call) − TTL is its leader's offset
	// plus at most the slack (≤ TTL) and the grace of the claims since, so
	// its offset is the nearest one when they are minutes apart and the TTL
	// is seconds (see mapped).
	Skews []time.Duration
}

// maxGrace bounds the grace the claims of one run add to an expiry.
const maxGrace = 10 * time.Second

// ClockTolerance absorbs the millisecond rounding of cluster time and the
// drift of the machine's wall clock against the monotonic one over a run
// (NTP slews at most 0.05 %); comparisons through Clock allow it.
const ClockTolerance = 25 * time.Millisecond

// CheckRenewals checks every acknowledged promise of a record's life against
// what was later observed of it (ARCHITECTURE.md, "Renewals"). A record's
// life is one lease id, from its grant to its holder's release call, or one
// registration of a renewal member's record (RenewerID), from the register's
// answer to the member's next register call. Its acknowledged answers are the
// grant or register and every renewal answered 200: each promises
// expiresAt ≥ now + TTL at the leader's cluster time now, taken after the
// request was sent at s.
//
//   - renewal-expired-early: the record was seen gone — a renewal answered
//     404 (or 409 for a lease) to its owner, a consistent read that does not
//     list it, its port granted to another lease — in an observation that
//     returned before s + TTL of an acknowledged answer. s + TTL is what the
//     client may rely on in real time: the cluster clock runs at the rate
//     of the harness's monotonic clock, and a claim rebases the remaining
//     time (plus grace), so no failover, partition, pause or clock offset
//     shortens it. The 0.2.4 TypeScript client relies on less, receive
//     time + TTL − 10 s, so this rule holds its leases too.
//   - renewal-answer-short: an answer's expiresAt, mapped through Clock,
//     falls before s + TTL: the node promised less than the leader must.
//     A follower judges at the leader's confirmed time on the leader's
//     confirmed state, so its answers are held to the same rule.
//   - renewal-answer-regressed: a later answer (sent after an earlier one
//     returned) promises an earlier real-time deadline than that earlier
//     answer. Within a term expiresAt never goes down; a claim rebases it to
//     remaining + grace, so as a real-time deadline it never goes down either.
//   - renewal-expired-before-expiresAt: the record was seen gone before the
//     real-time deadline of an answered expiresAt: records expire only
//     through a sweep at cluster time ≥ expiresAt.
//
// The three expiresAt-based checks run on the answers Clock can map (see
// Clock.mapped: in a run with clock offsets, the answers of short TTLs). A
// register whose outcome is unknown may take effect at any later instant and
// set expiresAt = now + TTL below an earlier answer with slack, so they also
// skip the lives of that record that follow one. The send-time rule needs no
// clock but the history's and holds everywhere.
func CheckRenewals(h []Op, clk Clock) []Violation {
	lives := renewalLives(h)
	observeGone(h, lives)
	keys := make([]string, 0, len(lives))
	for k := range lives {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	for _, k := range keys {
		out = append(out, lives[k].check(clk)...)
	}
	return out
}

// RenewalSummary tells how much CheckRenewals had to go on: the lives, the
// acknowledged answers (and how many of them it mapped through Clock), the
// observations of a record gone inside its life, and of those the one
// closest to the promise it must not break (ClosestMs: how long after the
// latest send + TTL it returned; -1 with none).
type RenewalSummary struct {
	Lives, Answers, Mapped, Gone int
	ClosestMs                    int64
}

// SummarizeRenewals is CheckRenewals's RenewalSummary of h.
func SummarizeRenewals(h []Op, clk Clock) RenewalSummary {
	lives := renewalLives(h)
	observeGone(h, lives)
	sum := RenewalSummary{Lives: len(lives), ClosestMs: -1}
	for _, l := range lives {
		var promised int64
		for _, a := range l.acks {
			sum.Answers++
			if !l.noExpiry && clk.mapped(a.op) {
				sum.Mapped++
			}
			promised = max(promised, a.deadline)
		}
		for _, g := range l.gone {
			if !l.within(g.call, g.ret) || len(l.acks) == 0 {
				continue
			}
			sum.Gone++
			if d := (g.ret - promised) / int64(time.Millisecond); sum.ClosestMs < 0 || d < sum.ClosestMs {
				sum.ClosestMs = d
			}
		}
	}
	return sum
}

// ack is one acknowledged promise.
type ack struct {
	op       Op
	deadline int64 // s + TTL on the history's clock
	mapped   int64 // the answered expiresAt on the history's clock (0 when not answered)
}

// gone is one observation that a record was not live, somewhere in [call, ret].
type gone struct {
	call, ret int64
	what      string
}

// life is one record's life: its acknowledged answers and what was seen of
// its absence.
type life struct {
	name       string
	start, end int64 // [first answer's return, end of the owner's use); end 0: open
	noExpiry   bool  // an indeterminate register may lower expiresAt: skip the mapped checks
	acks       []ack
	gone       []gone
	port       int    // lease lives
	leaseID    string // lease lives
	resID      string // resource lives
}

// within tells whether an observation over [call, ret] falls in the life:
// it began after the life's first answer returned and ended before its
// owner stopped using it (so it cannot be ordered after a release or a
// new register).
func (l *life) within(call, ret int64) bool { return call > l.start && (l.end == 0 || ret < l.end) }

// renewalLives collects the lives of leases and of renewal members' records.
func renewalLives(h []Op) map[string]*life {
	lives := map[string]*life{}
	perClient := map[int][]Op{}
	for _, o := range h {
		switch o.Kind {
		case LeaseAcquire, LeaseRenew, LeaseRelease, RenewRegister, RenewHeartbeat:
			perClient[o.Client] = append(perClient[o.Client], o)
		}
	}
	for c, ops := range perClient {
		sortByCall(ops)
		regs := map[string]int{}   // resource id → registrations begun
		cur := map[string]*life{}  // resource id → current life
		doubt := map[string]bool{} // resource id → a register of it was indeterminate
		for _, o := range ops {
			switch o.Kind {
			case LeaseAcquire:
				if o.Outcome != OK {
					continue
				}
				key := "lease " + o.LeaseID
				l := lives[key]
				if l == nil {
					l = &life{name: fmt.Sprintf("lease %s on port %d (client %d)", short(o.LeaseID), o.Port, c),
						start: o.Return, port: o.Port, leaseID: o.LeaseID}
					lives[key] = l
				}
				l.add(o)
			case LeaseRenew, LeaseRelease:
				l := lives["lease "+o.LeaseID]
				if l == nil || (l.end != 0 && o.Call >= l.end) {
					continue
				}
				if o.Kind == LeaseRelease {
					l.end = o.Call
					continue
				}
				switch {
				case o.Outcome == OK:
					l.add(o)
				case o.Outcome == Failed && (o.Status == 404 || o.Status == 409):
					l.gone = append(l.gone, gone{o.Call, o.Return, fmt.Sprintf("renewal answered %d %s by %s", o.Status, o.Code, o.Node)})
				}
			case RenewRegister:
				if l := cur[o.ResID]; l != nil && l.end == 0 {
					l.end = o.Call
				}
				cur[o.ResID] = nil
				if o.Outcome == Indeterminate {
					doubt[o.ResID] = true
				}
				if o.Outcome != OK {
					continue
				}
				regs[o.ResID]++
				l := &life{name: fmt.Sprintf("%s registration %d (client %d)", o.ResID, regs[o.ResID], c),
					start: o.Return, resID: o.ResID, noExpiry: doubt[o.ResID]}
				lives[fmt.Sprintf("resource %s#%d", o.ResID, regs[o.ResID])] = l
				cur[o.ResID] = l
				l.add(o)
			case RenewHeartbeat:
				l := cur[o.ResID]
				if l == nil {
					continue
				}
				switch {
				case o.Outcome == OK:
					l.add(o)
				case o.Outcome == Failed && o.Status == 404:
					l.gone = append(l.gone, gone{o.Call, o.Return, fmt.Sprintf("heartbeat answered 404 by %s", o.Node)})
				}
			}
		}
	}
	return lives
}

func (l *life) add(o Op) {
	l.acks = append(l.acks, ack{op: o, deadline: o.Call + o.TTLMs*int64(time.Millisecond)})
}

// observeGone adds the other clients' observations of absence to the lives
// they fall in: consistent reads that do not list a live record, and grants
// of a live lease's port to another lease.
func observeGone(h []Op, lives map[string]*life) {
	byPort := map[int][]*life{}
	var res []*life
	for _, l := range lives {
		if l.leaseID != "" {
			byPort[l.port] = append(byPort[l.port], l)
		} else {
			res = append(res, l)
		}
	}
	for _, o := range h {
		if o.Outcome != OK {
			continue
		}
		switch o.Kind {
		case LeaseRead:
			held := map[int]string{}
			for _, x := range o.Leases {
				held[x.Port] = x.LeaseID
			}
			for _, ls := range byPort {
				for _, l := range ls {
					if l.within(o.Call, o.Return) && held[l.port] != l.leaseID {
						l.gone = append(l.gone, gone{o.Call, o.Return, fmt.Sprintf("consistent read by client %d through %s lists port %d as %q",
							o.Client, o.Node, l.port, held[l.port])})
					}
				}
			}
		case LeaseAcquire:
			for _, l := range byPort[o.Port] {
				if o.LeaseID != l.leaseID && l.within(o.Call, o.Return) {
					l.gone = append(l.gone, gone{o.Call, o.Return, fmt.Sprintf("port granted to lease %s of client %d through %s",
						short(o.LeaseID), o.Client, o.Node)})
				}
			}
		case ResRead:
			listed := map[string]bool{}
			for _, r := range o.Resources {
				if strings.HasPrefix(r.ID, RenewerIDPrefix) {
					listed[r.ID] = true
				}
			}
			for _, l := range res {
				if l.within(o.Call, o.Return) && !listed[l.resID] {
					l.gone = append(l.gone, gone{o.Call, o.Return, fmt.Sprintf("consistent read by client %d through %s does not list it", o.Client, o.Node)})
				}
			}
		}
	}
}

// mapped tells whether an answer's offset can be told apart: with one
// offset, always; with several, when twice its TTL plus maxGrace stays under
// half their smallest spacing. (A 24 h lease's slack is capped at 5 minutes,
// as far as the clock-skew scenario's offsets are apart: its answers are held
// to the send-time rule only.)
func (clk Clock) mapped(o Op) bool {
	if clk.WallStartMs == 0 || o.ExpiresAt == 0 {
		return false
	}
	spacing := time.Duration(1<<63 - 1)
	for i, a := range clk.Skews {
		for _, b := range clk.Skews[i+1:] {
			if d := max(a-b, b-a); d > 0 {
				spacing = min(spacing, d)
			}
		}
	}
	return 2*time.Duration(o.TTLMs)*time.Millisecond+maxGrace < spacing/2
}

// mapExpiry maps an answered expiresAt onto the history's clock (see Clock).
func (clk Clock) mapExpiry(o Op) int64 {
	wallCall := clk.WallStartMs + o.Call/int64(time.Millisecond)
	excess := o.ExpiresAt - wallCall - o.TTLMs
	skew := int64(0)
	for _, k := range clk.Skews {
		if k := k.Milliseconds(); abs(excess-k) < abs(excess-skew) {
			skew = k
		}
	}
	return (o.ExpiresAt - skew - clk.WallStartMs) * int64(time.Millisecond)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func (l *life) check(clk Clock) []Violation {
	var out []Violation
	tolD := int64(ClockTolerance)
	for i := range l.acks {
		a := &l.acks[i]
		if l.noExpiry || !clk.mapped(a.op) {
			continue
		}
		a.mapped = clk.mapExpiry(a.op)
		if a.mapped < a.deadline-tolD {
			out = append(out, Violation{Kind: "renewal-answer-short", Detail: fmt.Sprintf(
				"%s: %s answered expiresAt %d, %.3fs before send + TTL", l.name, a.op, a.op.ExpiresAt, secs(a.deadline-a.mapped))})
		}
	}
	for j := range l.acks {
		b := l.acks[j]
		if b.mapped == 0 {
			continue
		}
		for _, a := range l.acks[:j] {
			if a.mapped != 0 && a.op.Return < b.op.Call && b.mapped < a.mapped-tolD {
				out = append(out, Violation{Kind: "renewal-answer-regressed", Detail: fmt.Sprintf(
					"%s: %s answered expiresAt %d, a deadline %.3fs earlier than that of %s (expiresAt %d)",
					l.name, b.op, b.op.ExpiresAt, secs(a.mapped-b.mapped), a.op, a.op.ExpiresAt)})
				break
			}
		}
	}
	for _, g := range l.gone {
		if !l.within(g.call, g.ret) {
			continue
		}
		var promised, mapped *ack
		for i := range l.acks {
			a := &l.acks[i]
			if promised == nil || a.deadline > promised.deadline {
				promised = a
			}
			if a.mapped != 0 && (mapped == nil || a.mapped > mapped.mapped) {
				mapped = a
			}
		}
		switch {
		case promised != nil && g.ret < promised.deadline-int64(Tolerance):
			out = append(out, Violation{Kind: "renewal-expired-early", Detail: fmt.Sprintf(
				"%s: %s %.3fs before send + TTL of %s", l.name, g.what, secs(promised.deadline-g.ret), promised.op)})
		case mapped != nil && g.ret < mapped.mapped-tolD:
			out = append(out, Violation{Kind: "renewal-expired-before-expiresAt", Detail: fmt.Sprintf(
				"%s: %s %.3fs before the expiresAt %d answered to %s", l.name, g.what, secs(mapped.mapped-g.ret), mapped.op.ExpiresAt, mapped.op)})
		}
	}
	return out
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }
