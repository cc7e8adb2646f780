package fsm

import "sort"

// The event ring: the FSM keeps the changes of the most recent log entries it
// applied, one Event per changed record, so that GET /v1/events can stream
// them and a client can resume from a Raft index (ARCHITECTURE.md, "The event
// stream"). Events are derived in Apply from the command and the state only,
// so every replica holds the same events for the same indexes. The ring is
// memory of this node, not replicated state: it is never part of a snapshot
// and does not enter Hash.

// Topic names a kind of change; a stream may ask for some topics only.
type Topic string

// Topics.
const (
	TopicResources  Topic = "resources"
	TopicLeases     Topic = "leases"
	TopicTokens     Topic = "tokens"
	TopicPrimary    Topic = "primary"
	TopicCandidates Topic = "candidates"
	TopicLimits     Topic = "limits"
	TopicTimeline   Topic = "timeline"
)

// Topics lists every topic.
var Topics = []Topic{TopicResources, TopicLeases, TopicTokens, TopicPrimary, TopicCandidates, TopicLimits, TopicTimeline}

// Event operations and reasons.
const (
	OpPut    = "put"
	OpDelete = "delete"

	ReasonDeleted  = "deleted"
	ReasonExpired  = "expired"
	ReasonReleased = "released"
)

// Event is one change made by the log entry at Index, at cluster time Time.
// Exactly one of the record fields is set, as Topic says; a delete carries
// only the record's key (ID, Port or Machine) and Reason.
type Event struct {
	Index  uint64
	Time   int64
	Topic  Topic
	Op     string
	Reason string

	ID        string         // resources
	rec       *record        // resources, put: see Resource
	Port      int            // leases
	Lease     *PortLease     // leases, put
	Machine   string         // tokens, candidates
	IssuedAt  string         // tokens, put (never the hash)
	Candidate *Candidate     // candidates, put
	Primary   *PrimaryEvent  // primary
	Limits    *Limits        // limits (in force, defaults filled in)
	Timeline  *TimelineEntry // timeline
}

// PrimaryEvent is a claim: the new primary and how the claim rebased every
// TTL (expiresAt > FromNow becomes ClaimedAt + expiresAt − FromNow + GraceMs,
// anything else ClaimedAt).
type PrimaryEvent struct {
	Primary
	FromNow int64
	GraceMs int64
}

// DefaultEventRing is how many events a node keeps for resuming streams.
const DefaultEventRing = 4096

// EventStatus tells a reader of the ring whether it can go on.
type EventStatus int

// Event statuses.
const (
	// EventsOK: the events returned follow the cursor without a gap.
	EventsOK EventStatus = iota
	// EventsSlow: the ring dropped events the cursor had not read yet.
	EventsSlow
	// EventsRestored: a snapshot restore replaced the state after the
	// cursor; the events before it are not known one by one.
	EventsRestored
)

// eventRing is a bounded FIFO of events numbered by a sequence that counts
// every event this FSM ever held (across restores). Guarded by FSM.mu.
type eventRing struct {
	buf      []Event // circular, len(buf) is the capacity
	first    uint64  // sequence number of the oldest held event
	next     uint64  // sequence number the next event gets
	floor    uint64  // the lowest index a resume may start after
	restored uint64  // sequence number of the first event after the last restore
	wake     chan struct{}
}

func newEventRing(capacity int) eventRing {
	return eventRing{buf: make([]Event, max(capacity, 1)), wake: make(chan struct{})}
}

func (r *eventRing) at(seq uint64) *Event { return &r.buf[seq%uint64(len(r.buf))] }

// push appends evs, dropping the oldest events past the capacity, and wakes
// the readers. Dropping an event of index k moves the floor to k: a resume
// from below k would miss it.
func (r *eventRing) push(evs []Event) {
	if len(evs) == 0 {
		return
	}
	for _, e := range evs {
		if r.next-r.first == uint64(len(r.buf)) {
			r.floor = max(r.floor, r.at(r.first).Index)
			*r.at(r.first) = Event{}
			r.first++
		}
		*r.at(r.next) = e
		r.next++
	}
	close(r.wake)
	r.wake = make(chan struct{})
}

// reset forgets every event: the state was replaced at index applied.
func (r *eventRing) reset(applied uint64) {
	for s := r.first; s < r.next; s++ {
		*r.at(s) = Event{}
	}
	r.first, r.restored, r.floor = r.next, r.next, applied
	close(r.wake)
	r.wake = make(chan struct{})
}

// EventCursor is a reader's position in the ring: the sequence number of the
// next event it reads, and the index it resumed after (events at or below it
// are skipped).
type EventCursor struct {
	seq   uint64
	after uint64
}

// EventStart is where a stream starts.
type EventStart struct {
	Cursor  EventCursor
	Applied uint64 // the FSM's applied index when the cursor was made
	Floor   uint64 // the lowest index a resume may start after
	Format  int
	// TooFarBehind is set when the resume index is below Floor; Cursor then
	// starts at the present (after Applied).
	TooFarBehind bool
}

// EventsFrom returns a cursor for a stream that resumes after index after
// (resume true) or starts at the present (resume false). A resume below the
// floor starts at the present with TooFarBehind set.
func (f *FSM) EventsFrom(after uint64, resume bool) EventStart {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := &f.ring
	st := EventStart{Applied: f.applied, Floor: r.floor, Format: f.st.format}
	if !resume || after < r.floor {
		st.TooFarBehind = resume
		st.Cursor = EventCursor{seq: r.next, after: f.applied}
		return st
	}
	// The ring holds at most its capacity (an int) of events, so the
	// conversions below cannot overflow.
	held := int(r.next - r.first)                                                             //nolint:gosec // G115: bounded by the ring's capacity
	i := sort.Search(held, func(i int) bool { return r.at(r.first+uint64(i)).Index > after }) //nolint:gosec // G115: 0 ≤ i < held
	st.Cursor = EventCursor{seq: r.first + uint64(i), after: after}                           //nolint:gosec // G115: 0 ≤ i ≤ held
	return st
}

// EventRead is what ReadEvents returns.
type EventRead struct {
	// Events are the events after the cursor (none when Status is not
	// EventsOK).
	Events []Event
	// Next is the cursor after Events; when Status is not EventsOK it starts
	// at the present, after index After.
	Next   EventCursor
	Status EventStatus
	After  uint64
	// Floor is the lowest index a resume may start after.
	Floor uint64
	// Wake is closed when more events arrive.
	Wake <-chan struct{}
}

// ReadEvents appends to buf (up to cap(buf), at least one) the events after
// the cursor. A status other than EventsOK means the cursor lost events.
func (f *FSM) ReadEvents(c EventCursor, buf []Event) EventRead {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := &f.ring
	res := EventRead{Floor: r.floor, Wake: r.wake, Events: buf[:0]}
	if c.seq < r.first {
		res.Status = EventsSlow
		if c.seq < r.restored {
			res.Status = EventsRestored
		}
		res.After = f.applied
		res.Next = EventCursor{seq: r.next, after: f.applied}
		return res
	}
	for c.seq < r.next && len(res.Events) < max(cap(buf), 1) {
		if e := r.at(c.seq); e.Index > c.after {
			res.Events = append(res.Events, *e)
		}
		c.seq++
	}
	res.Next = c
	return res
}

// SetEventRing sets the ring's capacity and forgets the events held. Call it
// before the FSM applies anything (cluster.Config.EventRing).
func (f *FSM) SetEventRing(capacity int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	floor := f.ring.floor
	f.ring = newEventRing(capacity)
	f.ring.floor = floor
}

// emit records an event of the command being applied, and that the table
// its topic belongs to changed (its watchers wake).
func (a *applier) emit(e Event) {
	e.Index, e.Time = a.index, a.now
	a.events = append(a.events, e)
	if t, ok := e.Topic.table(); ok {
		a.touched[t] = true
	}
}

// table is the table a topic's events change; the limits and the timeline
// belong to none.
func (t Topic) table() (Table, bool) {
	switch t {
	case TopicResources:
		return TableResources, true
	case TopicLeases:
		return TableLeases, true
	case TopicTokens:
		return TableTokens, true
	case TopicPrimary:
		return TablePrimary, true
	case TopicCandidates:
		return TableCandidates, true
	}
	return 0, false
}

// emitResource records a resource's put; the event holds the stored record,
// which is immutable, and converts it only when a stream reads it.
func (a *applier) emitResource(r *record) {
	a.emit(Event{Topic: TopicResources, Op: OpPut, ID: r.id(), rec: r})
}

// Resource returns the record a resources put carries, as it was after the
// change (false for any other event).
func (e Event) Resource() (Resource, bool) {
	if e.rec == nil {
		return Resource{}, false
	}
	return e.rec.resource(), true
}

func (a *applier) emitLease(l PortLease) {
	a.emit(Event{Topic: TopicLeases, Op: OpPut, Port: l.Port, Lease: &l})
}
