package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func kinds(tl []TimelineEntry) []string {
	out := make([]string, 0, len(tl))
	for _, e := range tl {
		s := e.Kind + " " + e.Holder + e.Machine
		if e.Kind == TimelinePrimary {
			s += fmt.Sprintf(" g%d", e.Generation)
		} else if e.Voter {
			s += " voter"
		}
		out = append(out, s)
	}
	return out
}

func TestFSM_TimelineRecordsClaimsAndMembership(t *testing.T) {
	h := atFormat(t, TimelineFormat)
	// The level starts the timeline with the claim in force, at its index.
	if tl := h.f.Timeline(); len(tl) != 1 || tl[0].Kind != TimelinePrimary || tl[0].Holder != "node-a" || tl[0].Index != 1 || tl[0].Time != t0 || tl[0].Generation != baseTerm {
		t.Fatalf("timeline at the level = %+v, want the baseline's claim", tl)
	}
	if _, ok := h.apply(SetFormat{Header: Header{Now: t0}, Level: MaxFormat + 1}).(error); !ok {
		t.Fatalf("an unknown level was accepted")
	}
	if tl := h.f.Timeline(); len(tl) != 1 {
		t.Fatalf("timeline after a refused level = %v", kinds(tl))
	}
	cand := Candidate{Machine: "node-d", URL: "http://10.0.0.4:8080", Raft: "10.0.0.4:7000"}
	put := func(now int64, c Candidate) { h.mustApply(PutCandidate{Header: Header{Now: now}, Candidate: c}) }
	put(t0+1, cand) // added
	put(t0+2, cand) // the same: nothing
	cand.Voter = true
	put(t0+3, cand) // promoted
	cand.URL = "http://10.0.0.5:8080"
	put(t0+4, cand) // updated
	cand.Voter = false
	put(t0+5, cand) // demoted
	h.mustApply(RemoveCandidate{Header: Header{Now: t0 + 6}, Machine: "node-d"})
	if _, ok := h.apply(RemoveCandidate{Header: Header{Now: t0 + 7}, Machine: "node-d"}).(error); !ok {
		t.Fatalf("a second remove succeeded")
	}
	h.term++
	claimAt := h.index + 1
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 8}, Holder: "node-b", GraceMs: 500})
	// A refused claim adds nothing.
	if _, ok := h.apply(ClaimPrimary{Header: Header{Now: t0 + 9}, Holder: "not a name", GraceMs: 500}).(error); !ok {
		t.Fatalf("a claim by a bad name succeeded")
	}
	tl := h.f.Timeline()
	want := []string{fmt.Sprintf("primary node-a g%d", baseTerm), "candidate-added node-d", "candidate-promoted node-d voter", "candidate-updated node-d voter", "candidate-demoted node-d", "candidate-removed node-d", fmt.Sprintf("primary node-b g%d", h.term)}
	if got := kinds(tl); !slices.Equal(got, want) {
		t.Fatalf("timeline = %v, want %v", got, want)
	}
	if last := tl[len(tl)-1]; last.Index != claimAt || last.Time != t0+8 {
		t.Errorf("the claim's entry = %+v, want index %d at t0+8", last, claimAt)
	}
	if tl[1].Time != t0+1 || tl[1].Index >= tl[2].Index {
		t.Errorf("entries = %+v, want the put's time and increasing indexes", tl)
	}
	// Each entry is also an event of the timeline topic.
	var events []string
	for _, e := range since(t, h.f, 0) {
		if e.Topic == TopicTimeline {
			events = append(events, fmt.Sprintf("%d %s", e.Timeline.Index, e.Timeline.Kind))
		}
	}
	var entries []string
	for _, e := range tl {
		entries = append(entries, fmt.Sprintf("%d %s", e.Index, e.Kind))
	}
	if !slices.Equal(events, entries) {
		t.Errorf("timeline events %v, want %v", events, entries)
	}
}

func TestFSM_TimelineIsBounded(t *testing.T) {
	h := atFormat(t, TimelineFormat)
	for i := range TimelineMax + 5 {
		h.term++
		h.mustApply(ClaimPrimary{Header: Header{Now: t0 + int64(i)}, Holder: fmt.Sprintf("node-%d", i), GraceMs: 0})
	}
	tl := h.f.Timeline()
	if len(tl) != TimelineMax {
		t.Fatalf("%d entries, want %d", len(tl), TimelineMax)
	}
	if tl[0].Holder != "node-5" || tl[len(tl)-1].Holder != fmt.Sprintf("node-%d", TimelineMax+4) {
		t.Errorf("timeline runs from %s to %s, want node-5 to node-%d", tl[0].Holder, tl[len(tl)-1].Holder, TimelineMax+4)
	}
	// A reader's copy is not changed by later entries.
	copyOf := h.f.Timeline()
	h.term++
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 1000}, Holder: "node-z", GraceMs: 0})
	if copyOf[0].Holder != "node-5" || copyOf[len(copyOf)-1].Holder != fmt.Sprintf("node-%d", TimelineMax+4) {
		t.Errorf("a copy read before a claim changed")
	}
}

func TestFSM_NoTimelineBelowFormat4(t *testing.T) {
	h := atFormat(t, 2)
	h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 3})
	h.term++
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 1}, Holder: "node-b", GraceMs: 0})
	h.mustApply(PutCandidate{Header: Header{Now: t0 + 2}, Candidate: Candidate{Machine: "node-d", URL: "http://10.0.0.4:8080", Raft: "10.0.0.4:7000"}})
	if tl := h.f.Timeline(); len(tl) != 0 {
		t.Errorf("timeline at format 3 = %v, want none", kinds(tl))
	}
	if doc := persist(t, h.f); bytes.Contains(doc, []byte(`"timeline"`)) {
		t.Errorf("a format 3 snapshot holds a timeline: %s", doc)
	}
}

// The timeline is replicated state: a replica restored from a snapshot, or
// one that replayed the log, holds the same.
func TestFSM_TimelineSurvivesSnapshots(t *testing.T) {
	h := atFormat(t, TimelineFormat)
	for i := range 3 {
		h.term++
		h.mustApply(ClaimPrimary{Header: Header{Now: t0 + int64(i)}, Holder: fmt.Sprintf("node-%d", i), GraceMs: 0})
		h.mustApply(PutCandidate{Header: Header{Now: t0 + int64(i)}, Candidate: Candidate{Machine: fmt.Sprintf("node-%d", i), URL: "http://10.0.0.4:8080", Raft: "10.0.0.4:7000"}})
	}
	doc := persist(t, h.f)
	if !bytes.Contains(doc, []byte(`"timeline":[{"index":`)) {
		t.Fatalf("snapshot without the timeline: %s", doc)
	}
	r := New()
	if err := restore(t, r, doc); err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(r.Timeline()), kinds(h.f.Timeline()); !slices.Equal(got, want) || len(got) != 7 {
		t.Errorf("restored timeline = %v, want %v", got, want)
	}
	if r.Hash() != h.f.Hash() {
		t.Errorf("restored hash differs")
	}
	// The timeline enters the hash: a replica without it differs.
	other := New()
	changed := bytes.Replace(doc, []byte(`"holder":"node-0"`), []byte(`"holder":"node-x"`), 1)
	if bytes.Equal(changed, doc) {
		t.Fatalf("the snapshot has no timeline entry of node-0")
	}
	if err := restore(t, other, changed); err != nil || other.Hash() == h.f.Hash() {
		t.Errorf("a changed timeline: Restore() = %v, and the same hash", err)
	}

	// A backup keeps it, and the restore's claim is its last entry.
	b, err := ReadBackup(bytes.NewReader(exported(t, h)))
	if err != nil {
		t.Fatal(err)
	}
	rebased, err := b.Rebase(RestoreParams{Holder: "node-a", Term: h.term + 1, Now: t0 + 10_000, Index: h.index + 100, Format: TimelineFormat})
	if err != nil {
		t.Fatal(err)
	}
	rf := New()
	if err := restore(t, rf, rebased); err != nil {
		t.Fatal(err)
	}
	tl := rf.Timeline()
	if len(tl) != 8 || tl[7].Kind != TimelinePrimary || tl[7].Holder != "node-a" || tl[7].Index != h.index+100 {
		t.Errorf("timeline after a restore = %v, want the backup's then the restore's claim", kinds(tl))
	}
	// A restore into a format 3 cluster is refused (the backup is newer).
	b, err = ReadBackup(bytes.NewReader(exported(t, h)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Rebase(RestoreParams{Holder: "node-a", Term: h.term + 1, Now: t0, Index: h.index + 100, Format: 3}); !errors.Is(err, ErrSnapshotTooNew) {
		t.Errorf("Rebase(format 3) = %v, want %v", err, ErrSnapshotTooNew)
	}
}

func TestFSM_TimelineRestoreRefuses(t *testing.T) {
	h := atFormat(t, TimelineFormat)
	h.term++
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 1}, Holder: "node-b", GraceMs: 0})
	good := string(persist(t, h.f))
	entry := `{"index":9,"time":1,"kind":"primary","generation":4,"holder":"node-b"}`
	many := strings.Repeat(entry+",", TimelineMax) + entry
	for _, tc := range []struct{ name, doc string }{
		{"a timeline at version 3", strings.Replace(good, `"version":4,`, `"version":3,`, 1)},
		{"a timeline over the bound", strings.Replace(good, `"timeline":[`, `"timeline":[`+many+`,`, 1)},
	} {
		if err := restore(t, New(), []byte(tc.doc)); err == nil {
			t.Errorf("%s: Restore() succeeded", tc.name)
		}
		if _, err := ReadBackup(strings.NewReader(tc.doc)); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: ReadBackup() = %v, want %v", tc.name, err, ErrInvalidSnapshot)
		}
	}
	for _, tc := range []struct{ name, from, to string }{
		{"an unknown kind", `"kind":"primary"`, `"kind":"coup"`},
		{"a holder that is no candidate name", `"holder":"node-b"}]`, `"holder":"Node B"}]`},
	} {
		doc := strings.Replace(good, tc.from, tc.to, 1)
		if doc == good {
			t.Fatalf("%s: the document does not hold %s", tc.name, tc.from)
		}
		if _, err := ReadBackup(strings.NewReader(doc)); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: ReadBackup() = %v, want %v", tc.name, err, ErrInvalidSnapshot)
		}
	}
}
