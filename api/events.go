package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// GET /v1/events streams the node's event ring as Server-Sent Events
// (ARCHITECTURE.md, "The event stream"; the wire contract is
// docs/events.md). The stream reads the node's own applied state, so it
// works through followers; it never holds the FSM's lock while it writes,
// and Apply never waits for it.

const (
	// defaultEventPing is how long a stream stays silent before a ": ping".
	defaultEventPing = 15 * time.Second
	// defaultEventWriteTimeout bounds each write to a stream's client: past
	// it the client is too slow and the stream ends.
	defaultEventWriteTimeout = 10 * time.Second
	// eventBatch is how many events a stream takes from the ring per read.
	eventBatch = 256
)

// streamEvents answers GET /v1/events.
func (s *Server) streamEvents(c echo.Context) error {
	topics, err := eventTopics(c.QueryParam("topic"))
	if err != nil {
		return err
	}
	after, resume, err := eventResume(c)
	if err != nil {
		return err
	}
	release, err := s.blockingSlot(c, "too many blocking queries and event streams on this node (or from this address); retry later")
	if err != nil {
		return err
	}
	defer release()
	s.streams.Add(1)
	defer s.streams.Add(-1)

	f := s.node.FSM()
	start := f.EventsFrom(after, resume)
	res := c.Response()
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(res)
	// The stream outlives the server's read timeout: without this the
	// connection's read deadline would end the request after 10 s.
	_ = rc.SetReadDeadline(time.Time{})
	res.WriteHeader(http.StatusOK)

	w := &sseWriter{rc: rc, res: res, timeout: s.eventWrite}
	helloAt := start.Applied
	if resume {
		helloAt = after
	}
	w.message(wire.EventHello, helloAt, wire.EventHelloData{Node: s.node.ID(), Index: helloAt, Applied: start.Applied, Floor: start.Floor, Format: start.Format})
	if start.TooFarBehind {
		w.message(wire.EventReset, start.Applied, wire.EventResetData{Index: start.Applied, Floor: start.Floor, Reason: wire.ResetTooFarBehind})
	}
	if !w.flush() {
		return nil
	}

	ctx := c.Request().Context()
	ping := time.NewTimer(s.eventPing)
	defer ping.Stop()
	cursor := start.Cursor
	buf := make([]fsm.Event, 0, eventBatch)
	for {
		r := f.ReadEvents(cursor, buf)
		cursor = r.Next
		switch {
		case r.Status != fsm.EventsOK:
			reason := wire.ResetSlowConsumer
			if r.Status == fsm.EventsRestored {
				reason = wire.ResetSnapshotRestored
			}
			w.message(wire.EventReset, r.After, wire.EventResetData{Index: r.After, Floor: r.Floor, Reason: reason})
		case len(r.Events) > 0:
			for _, e := range r.Events {
				if topics[e.Topic] {
					name, data := s.wireEvent(e)
					w.message(name, e.Index, data)
				}
			}
		default:
			select {
			case <-r.Wake:
				continue
			case <-ping.C:
				w.comment("ping")
			case <-ctx.Done():
				return nil
			case <-s.closing:
				return nil
			}
		}
		wrote := w.buf.Len() > 0
		if !w.flush() {
			return nil
		}
		if wrote {
			ping.Reset(s.eventPing)
		}
	}
}

// eventTopics parses ?topic=a,b (default every topic).
func eventTopics(raw string) (map[fsm.Topic]bool, error) {
	out := make(map[fsm.Topic]bool, len(fsm.Topics))
	if raw == "" {
		for _, t := range fsm.Topics {
			out[t] = true
		}
		return out, nil
	}
	for name := range strings.SplitSeq(raw, ",") {
		t := fsm.Topic(strings.TrimSpace(name))
		if !slices.Contains(fsm.Topics, t) {
			names := make([]string, 0, len(fsm.Topics))
			for _, t := range fsm.Topics {
				names = append(names, string(t))
			}
			return nil, badRequest("query parameter topic is a comma-separated list of " + strings.Join(names, ", "))
		}
		out[t] = true
	}
	return out, nil
}

// eventResume reads the index a stream resumes after: the Last-Event-ID
// header, else ?index.
func eventResume(c echo.Context) (after uint64, resume bool, err error) {
	name, raw := "header Last-Event-ID", c.Request().Header.Get("Last-Event-ID")
	if raw == "" {
		name, raw = "query parameter index", c.QueryParam("index")
	}
	if raw == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, false, badRequest(name + " must be a non-negative integer (a Raft index)")
	}
	return n, true, nil
}

// wireEvent turns an event of the ring into its SSE name and payload.
func (s *Server) wireEvent(e fsm.Event) (string, any) {
	switch e.Topic {
	case fsm.TopicResources:
		d := wire.EventResourceData{Index: e.Index, Time: e.Time, Op: e.Op, ID: e.ID, Reason: e.Reason}
		if rec, ok := e.Resource(); ok {
			r := wireResource(rec)
			d.Resource = &r
		}
		return wire.EventResource, d
	case fsm.TopicLeases:
		d := wire.EventLeaseData{Index: e.Index, Time: e.Time, Op: e.Op, Port: e.Port, Reason: e.Reason}
		if e.Lease != nil {
			l := wirePortLease(*e.Lease)
			d.Lease = &l
		}
		return wire.EventLease, d
	case fsm.TopicTokens:
		return wire.EventToken, wire.EventTokenData{Index: e.Index, Time: e.Time, Op: e.Op, Machine: e.Machine, IssuedAt: e.IssuedAt}
	case fsm.TopicPrimary:
		p := e.Primary
		return wire.EventPrimary, wire.EventPrimaryData{Index: e.Index, Time: e.Time, Holder: p.Holder, Generation: p.Generation,
			ClaimedAt: p.ClaimedAt, Rebase: wire.EventRebase{FromNow: p.FromNow, GraceMs: p.GraceMs}}
	case fsm.TopicCandidates:
		d := wire.EventCandidateData{Index: e.Index, Time: e.Time, Op: e.Op, Machine: e.Machine}
		if c := e.Candidate; c != nil {
			d.Candidate = &wire.CandidateEntry{Machine: c.Machine, URL: c.URL, Raft: c.Raft, Voter: c.Voter, AddedAt: c.AddedAt}
		}
		return wire.EventCandidate, d
	case fsm.TopicLimits:
		l := e.Limits
		return wire.EventLimits, wire.EventLimitsData{Index: e.Index, Time: e.Time, Limits: wire.Limits{
			ResourcesPerMachine: l.ResourcesPerMachine, LeasesPerMachine: l.LeasesPerMachineIn(s.band.Start, s.band.End),
			Resources: l.Resources, IdempotencyKeys: l.IdempotencyKeys,
		}}
	default: // fsm.TopicTimeline
		return wire.EventTimeline, wire.EventTimelineData{Index: e.Index, Time: e.Time, Entry: wireTimelineEntry(*e.Timeline)}
	}
}

// sseWriter writes SSE messages into a buffer and flushes them to the
// client with a write deadline; after a failed write it writes nothing.
type sseWriter struct {
	rc      *http.ResponseController
	res     *echo.Response
	timeout time.Duration
	buf     bytes.Buffer
	dead    bool
}

func (w *sseWriter) message(event string, id uint64, data any) {
	body, err := json.Marshal(data)
	if err != nil { // the wire types always marshal
		body = []byte(`{}`)
	}
	w.buf.WriteString("id: ")
	w.buf.WriteString(strconv.FormatUint(id, 10))
	w.buf.WriteString("\nevent: ")
	w.buf.WriteString(event)
	w.buf.WriteString("\ndata: ")
	w.buf.Write(body)
	w.buf.WriteString("\n\n")
}

func (w *sseWriter) comment(text string) { w.buf.WriteString(": " + text + "\n\n") }

// flush sends what is buffered; false once the client is gone or too slow.
func (w *sseWriter) flush() bool {
	if w.dead {
		return false
	}
	if w.buf.Len() == 0 {
		return true
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	if _, err := w.res.Write(w.buf.Bytes()); err != nil {
		w.dead = true
		return false
	}
	w.buf.Reset()
	if err := w.rc.Flush(); err != nil {
		w.dead = true
	}
	return !w.dead
}

// timeline answers GET /v1/cluster/timeline.
func (s *Server) timeline(c echo.Context) (wire.Timeline, error) {
	f := s.node.FSM()
	s.readHeaders(c, fsm.TablePrimary)
	out := wire.Timeline{Format: f.Format(), Index: f.AppliedIndex(), Entries: []wire.TimelineEntry{}}
	for _, e := range f.Timeline() {
		out.Entries = append(out.Entries, wireTimelineEntry(e))
	}
	return out, nil
}

func wireTimelineEntry(e fsm.TimelineEntry) wire.TimelineEntry {
	out := wire.TimelineEntry{Index: e.Index, Time: e.Time, Kind: e.Kind, Generation: e.Generation, Holder: e.Holder, Machine: e.Machine}
	if e.Kind != fsm.TimelinePrimary {
		voter := e.Voter
		out.Voter = &voter
	}
	return out
}
