package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// drain reads every event after the cursor, asserting the ring lost none.
func drain(t *testing.T, f *FSM, c EventCursor) ([]Event, EventCursor) {
	t.Helper()
	var out []Event
	buf := make([]Event, 0, 7) // a small buffer: reads span several calls
	for {
		r := f.ReadEvents(c, buf)
		if r.Status != EventsOK {
			t.Fatalf("ReadEvents() status = %d, want EventsOK", r.Status)
		}
		out = append(out, r.Events...)
		if r.Next == c {
			return out, c
		}
		c = r.Next
	}
}

// since returns every event after index after, as a resuming stream reads them.
func since(t *testing.T, f *FSM, after uint64) []Event {
	t.Helper()
	st := f.EventsFrom(after, true)
	if st.TooFarBehind {
		t.Fatalf("EventsFrom(%d) is too far behind (floor %d)", after, st.Floor)
	}
	evs, _ := drain(t, f, st.Cursor)
	return evs
}

// brief is an event in one line: index, topic, op, key, reason.
func brief(e Event) string {
	key := e.ID
	switch e.Topic {
	case TopicLeases:
		key = fmt.Sprint(e.Port)
	case TopicTokens, TopicCandidates:
		key = e.Machine
	case TopicPrimary:
		key = e.Primary.Holder
	case TopicTimeline:
		key = e.Timeline.Kind
	}
	return strings.Join(strings.Fields(fmt.Sprintf("%d %s %s %s %s", e.Index, e.Topic, e.Op, key, e.Reason)), " ")
}

func briefs(evs []Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, brief(e))
	}
	return out
}

func TestFSM_EventsOfEveryChange(t *testing.T) {
	h := atFormat(t, 2) // indexes 1-4 the baseline, 5 the format
	start := h.f.AppliedIndex()
	reg := registerCmd(t0+1, memberCaller, "machine:mbp", "mbp")
	h.mustApply(reg)                                                                                     // 6
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 2}, Caller: memberCaller, ID: "machine:mbp"}) // 7
	lease := mustResult[PortLease](h, acquireCmd(t0+3, memberCaller, "lease-1"))                         // 8
	h.mustApply(RenewLease{Header: Header{Now: t0 + 4}, Caller: memberCaller, Port: lease.Port, LeaseID: "lease-1"})
	h.mustApply(ReleaseLease{Header: Header{Now: t0 + 5}, Caller: memberCaller, Port: lease.Port, LeaseID: "lease-1"})
	h.mustApply(DeleteResource{Header: Header{Now: t0 + 6}, Caller: memberCaller, ID: "machine:mbp"}) // 11
	h.mustApply(IssueToken{Header: Header{Now: t0 + 7}, Machine: "mbp", SHA256: tokenSumOne})
	h.mustApply(RevokeToken{Header: Header{Now: t0 + 8}, Machine: "mbp"})
	// A refused command changes nothing and sends nothing.
	if _, ok := h.apply(RevokeToken{Header: Header{Now: t0 + 9}, Machine: "mbp"}).(error); !ok {
		t.Fatalf("a second revoke succeeded")
	}
	h.mustApply(SetLimits{Header: Header{Now: t0 + 10}, Limits: Limits{Resources: 10}}) // 15
	cand := Candidate{Machine: "node-d", URL: "http://10.0.0.4:8080", Raft: "10.0.0.4:7000"}
	h.mustApply(PutCandidate{Header: Header{Now: t0 + 11}, Candidate: cand})
	h.mustApply(RemoveCandidate{Header: Header{Now: t0 + 12}, Machine: "node-d"})
	// A batch of two and a sweep of two: several events at one index.
	b, err := NewBatch(t0+13, []Command{registerCmd(t0+13, memberCaller, "machine:a", "a"), registerCmd(t0+13, memberCaller, "machine:b", "b")})
	if err != nil {
		t.Fatal(err)
	}
	h.mustApply(b)                                    // 18
	h.mustApply(Sweep{Header: Header{Now: t0 + ttl}}) // 19: the baseline's resource and lease, then a and b are still live
	h.mustApply(Sweep{Header: Header{Now: t0 + 13 + ttl}})
	h.term++
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 2*ttl}, Holder: "node-b", GraceMs: 500}) // 21

	got := briefs(since(t, h.f, start))
	want := []string{
		"6 resources put machine:mbp", "7 resources put machine:mbp",
		fmt.Sprintf("8 leases put %d", lease.Port), fmt.Sprintf("9 leases put %d", lease.Port), fmt.Sprintf("10 leases delete %d released", lease.Port),
		"11 resources delete machine:mbp deleted",
		"12 tokens put mbp", "13 tokens delete mbp",
		"15 limits", "16 candidates put node-d", "17 candidates delete node-d",
		"18 resources put machine:a", "18 resources put machine:b",
		"19 resources delete machine:base expired", fmt.Sprintf("19 leases delete %d expired", bandLow),
		"20 resources delete machine:a expired", "20 resources delete machine:b expired",
		"21 primary node-b",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	evs := since(t, h.f, start)
	if r, ok := evs[1].Resource(); !ok || r.RenewedAt != t0+2 || r.Revision != 7 || evs[1].Time != t0+2 {
		t.Errorf("heartbeat event = %+v, want the renewed record at t0+2", evs[1])
	}
	if e := evs[6]; e.IssuedAt != "2023-11-14T22:13:20.007Z" || e.rec != nil {
		t.Errorf("token event = %+v, want machine and issue time only", e)
	}
	if l := evs[8].Limits; l == nil || l.Resources != 10 || l.ResourcesPerMachine != DefaultResourcesPerMachine {
		t.Errorf("limits event = %+v, want the limits in force", l)
	}
	p := evs[len(evs)-1].Primary
	if p.Generation != baseTerm+1 || p.Index != 21 || p.ClaimedAt != t0+2*ttl || p.FromNow != t0+13+ttl || p.GraceMs != 500 {
		t.Errorf("primary event = %+v", p)
	}
}

func TestFSM_EventsResume(t *testing.T) {
	h := newBaseline(t)
	for i := range 5 {
		cmds := []Command{registerCmd(t0, memberCaller, fmt.Sprintf("machine:m%d", i), fmt.Sprint("m", i)), registerCmd(t0, memberCaller, fmt.Sprintf("machine:n%d", i), fmt.Sprint("n", i))}
		b, err := NewBatch(t0, cmds)
		if err != nil {
			t.Fatal(err)
		}
		h.mustApply(b)
	}
	all := since(t, h.f, 0)
	if len(all) != 4+10 {
		t.Fatalf("%d events, want 14", len(all))
	}
	// From every index, exactly the events of the later entries.
	for n := uint64(0); n <= h.index+1; n++ {
		var want []string
		for _, e := range all {
			if e.Index > n {
				want = append(want, brief(e))
			}
		}
		if got := briefs(since(t, h.f, n)); !slices.Equal(got, want) {
			t.Errorf("resume after %d: %v, want %v", n, got, want)
		}
	}
	// A resume above the applied index waits for the entries past it.
	st := h.f.EventsFrom(h.index+1, true)
	h.mustApply(registerCmd(t0, memberCaller, "machine:x", "x")) // index+1: not sent
	h.mustApply(registerCmd(t0, memberCaller, "machine:y", "y"))
	if got, _ := drain(t, h.f, st.Cursor); !slices.Equal(briefs(got), []string{fmt.Sprintf("%d resources put machine:y", h.index)}) {
		t.Errorf("resume ahead of the node: %v", briefs(got))
	}
	// A fresh stream starts at the present.
	st = h.f.EventsFrom(0, false)
	if st.Applied != h.index || st.TooFarBehind {
		t.Errorf("EventsFrom(fresh) = %+v, want applied %d", st, h.index)
	}
	if got, _ := drain(t, h.f, st.Cursor); len(got) != 0 {
		t.Errorf("a fresh stream read %v", briefs(got))
	}
}

func TestFSM_EventsRingIsBounded(t *testing.T) {
	h := newHarness(t)
	h.f.SetEventRing(4)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	slow := h.f.EventsFrom(0, true).Cursor
	b, err := NewBatch(t0, []Command{registerCmd(t0, memberCaller, "machine:a", "a"), registerCmd(t0, memberCaller, "machine:b", "b"), registerCmd(t0, memberCaller, "machine:c", "c")})
	if err != nil {
		t.Fatal(err)
	}
	h.mustApply(b)                                               // 2: three events
	h.mustApply(registerCmd(t0, memberCaller, "machine:d", "d")) // 3
	h.mustApply(registerCmd(t0, memberCaller, "machine:e", "e")) // 4: the claim and one of 2's are dropped
	st := h.f.EventsFrom(0, true)
	if !st.TooFarBehind || st.Floor != 2 {
		t.Errorf("EventsFrom(0) = %+v, want too far behind with floor 2", st)
	}
	if st := h.f.EventsFrom(1, true); !st.TooFarBehind {
		t.Errorf("EventsFrom(1) = %+v, want too far behind: index 2 lost an event", st)
	}
	if got := briefs(since(t, h.f, 2)); !slices.Equal(got, []string{"3 resources put machine:d", "4 resources put machine:e"}) {
		t.Errorf("resume after 2 = %v", got)
	}
	// A reader that did not keep up is told so, and starts at the present.
	r := h.f.ReadEvents(slow, make([]Event, 0, 8))
	if r.Status != EventsSlow || r.After != 4 || r.Floor != 2 {
		t.Errorf("slow reader: status %d after %d floor %d, want EventsSlow after 4, floor 2", r.Status, r.After, r.Floor)
	}
	h.mustApply(registerCmd(t0, memberCaller, "machine:f", "f"))
	if got, _ := drain(t, h.f, r.Next); !slices.Equal(briefs(got), []string{"5 resources put machine:f"}) {
		t.Errorf("after the slow status: %v", briefs(got))
	}
}

func TestFSM_EventsAfterRestore(t *testing.T) {
	src := rich(t)
	data := persist(t, src.f)
	h := newBaseline(t)
	reader := h.f.EventsFrom(0, true).Cursor
	if err := restore(t, h.f, data); err != nil {
		t.Fatal(err)
	}
	applied := src.f.AppliedIndex()
	if r := h.f.ReadEvents(reader, make([]Event, 0, 4)); r.Status != EventsRestored || r.After != applied {
		t.Errorf("a reader across a restore: status %d after %d, want EventsRestored after %d", r.Status, r.After, applied)
	}
	if st := h.f.EventsFrom(applied-1, true); !st.TooFarBehind || st.Floor != applied {
		t.Errorf("EventsFrom(below the snapshot) = %+v, want too far behind, floor %d", st, applied)
	}
	if got := since(t, h.f, applied); len(got) != 0 {
		t.Errorf("events after the snapshot = %v, want none", briefs(got))
	}
}

// Two replicas that apply the same log hold the same events.
func TestFSM_EventsDeterministic(t *testing.T) {
	for seed := range uint64(5) {
		g := &randomLog{rng: rand.New(rand.NewPCG(seed, 0xe7e7)), h: newHarness(t), now: t0, peek: New()}
		a, b := New(), New()
		for range 1000 {
			e := g.entry()
			g.peek.Apply(e)
			a.Apply(e)
			b.Apply(e)
		}
		ea, eb := since(t, a, 0), since(t, b, 0)
		if len(ea) < 150 {
			t.Fatalf("seed %d: only %d events", seed, len(ea))
		}
		if ja, jb := eventsJSON(ea), eventsJSON(eb); ja != jb {
			t.Fatalf("seed %d: the replicas' events differ", seed)
		}
		for i := 1; i < len(ea); i++ {
			if ea[i].Index < ea[i-1].Index {
				t.Fatalf("seed %d: event %d at index %d after index %d", seed, i, ea[i].Index, ea[i-1].Index)
			}
		}
	}
}

// eventsJSON encodes events with the records they carry.
func eventsJSON(evs []Event) string {
	type withRecord struct {
		Event
		Record *Resource
	}
	out := make([]withRecord, 0, len(evs))
	for _, e := range evs {
		w := withRecord{Event: e}
		if r, ok := e.Resource(); ok {
			w.Record = &r
		}
		out = append(out, w)
	}
	return jsonOf(out)
}
