package fsm

import (
	"fmt"

	"github.com/elanous/elanous-node/wire"
)

// The timeline is the replicated history of the primary and of the
// candidate directory (format 4): the last TimelineMax claims and
// membership changes, appended by Apply from the claim and candidate
// commands themselves, so every replica holds the same entries and a
// snapshot carries them (ARCHITECTURE.md, "The event stream").

// TimelineFormat is the format level that keeps the timeline.
const TimelineFormat = 4

// TimelineMax bounds the timeline: past it the oldest entries go first.
const TimelineMax = 100

// Timeline entry kinds.
const (
	TimelinePrimary           = "primary"
	TimelineCandidateAdded    = "candidate-added"
	TimelineCandidateRemoved  = "candidate-removed"
	TimelineCandidatePromoted = "candidate-promoted"
	TimelineCandidateDemoted  = "candidate-demoted"
	TimelineCandidateUpdated  = "candidate-updated"
)

// TimelineEntry is one change of the timeline, made by the log entry at
// Index at cluster time Time. A primary entry has Generation and Holder; a
// candidate entry has Machine and Voter (the vote after the change).
type TimelineEntry struct {
	Index      uint64 `json:"index"`
	Time       int64  `json:"time"`
	Kind       string `json:"kind"`
	Generation uint64 `json:"generation,omitempty"`
	Holder     string `json:"holder,omitempty"`
	Machine    string `json:"machine,omitempty"`
	Voter      bool   `json:"voter,omitempty"`
}

// Timeline returns the timeline, oldest first (empty below format 4).
func (f *FSM) Timeline() []TimelineEntry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]TimelineEntry{}, f.st.timeline...)
}

// addTimeline appends an entry at the applier's index and time (format 4),
// dropping the oldest past TimelineMax, and emits its event.
func (a *applier) addTimeline(e TimelineEntry) {
	if a.st.format < TimelineFormat {
		return
	}
	e.Index, e.Time = a.index, a.now
	tl := a.st.timeline
	if len(tl) >= TimelineMax {
		// A fresh slice: a reader's copy or a snapshot view may share the old one.
		tl = append([]TimelineEntry{}, tl[len(tl)-TimelineMax+1:]...)
	}
	a.st.timeline = append(tl, e)
	a.emit(Event{Topic: TopicTimeline, Timeline: &e})
}

// seedTimeline starts the timeline when the format level reaches 4: with
// the claim in force, at the claim's own index and time, so a cluster's
// timeline names its primary from the start.
func (a *applier) seedTimeline() {
	p := a.st.primary
	if p.Holder == "" {
		return
	}
	e := TimelineEntry{Index: p.Index, Time: p.ClaimedAt, Kind: TimelinePrimary, Generation: p.Generation, Holder: p.Holder}
	a.st.timeline = []TimelineEntry{e}
	a.emit(Event{Topic: TopicTimeline, Timeline: &e})
}

// candidateChange is the timeline kind of putting cand over old (exists:
// old was in the directory), or "" when nothing the timeline records changed.
func candidateChange(old Candidate, exists bool, cand Candidate) string {
	switch {
	case !exists:
		return TimelineCandidateAdded
	case !old.Voter && cand.Voter:
		return TimelineCandidatePromoted
	case old.Voter && !cand.Voter:
		return TimelineCandidateDemoted
	case old.URL != cand.URL || old.Raft != cand.Raft:
		return TimelineCandidateUpdated
	}
	return ""
}

// checkTimeline refuses a backup's timeline that no replica could hold: an
// unknown kind, a name that is not a candidate's, indexes out of order.
func checkTimeline(tl []TimelineEntry) error {
	var last uint64
	for _, e := range tl {
		name := e.Machine
		switch e.Kind {
		case TimelinePrimary:
			name = e.Holder
		case TimelineCandidateAdded, TimelineCandidateRemoved, TimelineCandidatePromoted, TimelineCandidateDemoted, TimelineCandidateUpdated:
		default:
			return fmt.Errorf("timeline entry at index %d: unknown kind %q", e.Index, e.Kind)
		}
		if !wire.ValidCandidate(name) {
			return fmt.Errorf("timeline entry at index %d: %q is not a candidate name", e.Index, name)
		}
		if e.Index < last {
			return fmt.Errorf("timeline entry at index %d comes after index %d", e.Index, last)
		}
		last = e.Index
	}
	return nil
}
