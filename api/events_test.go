package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// eventWait bounds a wait for the next event: a failure bound, not a
// measurement.
const eventWait = 20 * time.Second

// openEvents opens GET /v1/events on url with query and headers, wanting 200.
func openEvents(t *testing.T, client *http.Client, url, token, query string, header map[string]string) *testutil.SSEStream {
	t.Helper()
	s, r := testutil.OpenSSE(t, client, url+"/v1/events"+query, token, header)
	if s == nil {
		t.Fatalf("GET /v1/events%s = %s, want 200", query, r)
	}
	if ct := r.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	return s
}

// hello reads the stream's first message, which must be hello.
func hello(t *testing.T, s *testutil.SSEStream) wire.EventHelloData {
	t.Helper()
	m := s.NextMessage(t, eventWait)
	if m.Event != wire.EventHello {
		t.Fatalf("first message = %+v, want hello", m)
	}
	var h wire.EventHelloData
	eventData(t, m.Data, &h)
	if m.ID != strconv.FormatUint(h.Index, 10) {
		t.Errorf("hello id %s, index %d: want equal", m.ID, h.Index)
	}
	return h
}

func eventData(t *testing.T, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("event data %q: %v", data, err)
	}
}

// take reads n messages that are not comments.
func take(t *testing.T, s *testutil.SSEStream, n int) []testutil.SSEMessage {
	t.Helper()
	out := make([]testutil.SSEMessage, 0, n)
	for range n {
		out = append(out, s.NextMessage(t, eventWait))
	}
	return out
}

// summary is a message as one comparable line.
func summary(m testutil.SSEMessage) string { return m.ID + " " + m.Event + " " + m.Data }

func register(t *testing.T, url, token, id string, ttl int64, attrs map[string]json.RawMessage) {
	t.Helper()
	machine := strings.TrimPrefix(id, "machine:")
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/resources/register", token, wire.RegisterRequest{
		ID: id, Kind: "machine", Name: machine, Machine: machine, TTLMs: ttl, ObservedAt: time.Now().UnixMilli(), Attrs: attrs,
	}))
	testutil.WantStatus(t, "register "+id, r, http.StatusOK)
}

// TestEvents_Stream covers GET /v1/events through a follower
// (ARCHITECTURE.md, "The event stream"): every kind of change, resume by
// Last-Event-ID and ?index without gap or duplicate, the topic filter, a
// reset for a client too far behind and for a slow one, pings, the
// blocking-query slots, bad input, and the end of the stream at shutdown.
// The subtests share one cluster and run in order.
func TestEvents_Stream(t *testing.T) {
	const ring = 64
	regs := make(registries, 3)
	opts := clusterOptions()
	// The slow-consumer case writes 13 MiB of heartbeats in a few seconds:
	// 1 s Raft timeouts keep a loaded machine's leader in place.
	opts.Timeout = time.Second
	opts.EventRing = ring
	// Every heartbeat and renewal is an entry, so each is an event: a
	// renewal the slack covers is answered without one and sends nothing.
	opts.EveryRenewalWrites = true
	opts.API = func(i int, d *api.Deps) {
		regs[i] = prometheus.NewRegistry()
		d.Registry = regs[i]
		d.EventPing = 100 * time.Millisecond
		d.EventWriteTimeout = 2 * time.Minute
		d.Limits.BlockingQueries, d.Limits.BlockingQueriesPerAddress = 4, 4
	}
	c := apitest.Start(t, opts)
	fi := c.Follower()
	follower, leader := c.Nodes[fi], c.Nodes[c.Leader()]
	query, member := c.Tokens.Query, c.Tokens.Member

	t.Run("bad input", func(t *testing.T) {
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/events"})
		testutil.WantError(t, "GET /v1/events without a token", r, http.StatusUnauthorized, wire.CodeUnauthorized)
		for _, tc := range []struct{ query, lastID string }{
			{query: "?index=x"}, {query: "?index=-1"}, {lastID: "12a"}, {query: "?topic=nope"},
			{query: "?topic=leases,"}, {query: "?topic=,"}, {query: "?index=1", lastID: "1.5"},
		} {
			call := testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/events" + tc.query, Auth: testutil.Bearer(query)}
			if tc.lastID != "" {
				call = call.WithHeader("Last-Event-ID", tc.lastID)
			}
			r := testutil.Send(t, call)
			testutil.WantError(t, fmt.Sprintf("GET /v1/events%s Last-Event-ID %q", tc.query, tc.lastID), r, http.StatusBadRequest, wire.CodeInvalidRequest)
		}
	})

	var all []testutil.SSEMessage // every change of the next subtests, as the follower streamed them
	var start uint64              // the index the follower's first stream continued after
	t.Run("every change through a follower", func(t *testing.T) {
		c.WaitApplied()
		s := openEvents(t, nil, follower.URL, query, "", nil)
		h := hello(t, s)
		if h.Node != follower.Machine || h.Index != h.Applied || h.Format < 2 || h.Floor > h.Index {
			t.Fatalf("hello = %+v, want the follower at its applied index", h)
		}
		start = h.Index
		issued := issueToken(t, c, leader.URL, "m1")
		register(t, leader.URL, member, "machine:m1", 60_000, nil)
		testutil.Expect(t, testutil.Call{Method: http.MethodPost, URL: follower.URL + "/v1/resources/machine:m1/heartbeat", Auth: testutil.Bearer(member)}, http.StatusOK)
		l := acquire(t, follower.URL, member, wire.AcquireRequest{Machine: "m1", Purpose: "events", TTLMs: 60_000})
		testutil.Expect(t, leaseCall(http.MethodPost, follower.URL, l.Port, member, l.LeaseID), http.StatusOK)
		testutil.Expect(t, leaseCall(http.MethodDelete, follower.URL, l.Port, member, l.LeaseID), http.StatusNoContent)
		testutil.Expect(t, testutil.Call{Method: http.MethodDelete, URL: leader.URL + "/v1/resources/machine:m1", Auth: testutil.Bearer(member)}, http.StatusNoContent)
		testutil.Expect(t, testutil.Call{Method: http.MethodDelete, URL: leader.URL + "/v1/tokens/member/m1", Auth: testutil.Bearer(c.Tokens.Admin)}, http.StatusNoContent)

		all = take(t, s, 8)
		want := []string{"token put", "resource put", "resource put", "lease put", "lease put", "lease delete", "resource delete", "token delete"}
		var last uint64
		for i, m := range all {
			var d struct {
				Index uint64 `json:"index"`
				Time  int64  `json:"time"`
				Op    string `json:"op"`
			}
			eventData(t, m.Data, &d)
			id, err := strconv.ParseUint(m.ID, 10, 64)
			if err != nil || id != d.Index || id <= last || d.Time == 0 {
				t.Errorf("message %d: id %q, data %s: want the increasing Raft index in both and a time", i, m.ID, m.Data)
			}
			last = id
			if got := m.Event + " " + d.Op; got != want[i] {
				t.Errorf("message %d = %s, want %s", i, got, want[i])
			}
		}
		sum := sha256.Sum256([]byte(issued.Token))
		for _, m := range []testutil.SSEMessage{all[0], all[7]} {
			if strings.Contains(m.Data, issued.Token) || strings.Contains(m.Data, hex.EncodeToString(sum[:])) || strings.Contains(m.Data, "sha256") {
				t.Errorf("token event %s shows the token or its hash", m.Data)
			}
		}
		var tok wire.EventTokenData
		eventData(t, all[0].Data, &tok)
		if tok.Machine != "m1" || tok.IssuedAt == "" {
			t.Errorf("token event = %+v, want machine m1 and its issue time", tok)
		}
		var res wire.EventResourceData
		eventData(t, all[2].Data, &res)
		if res.Resource == nil || res.Resource.ID != "machine:m1" || res.Resource.Revision != res.Index {
			t.Errorf("heartbeat event = %s, want the renewed record", all[2].Data)
		}
		var del wire.EventLeaseData
		eventData(t, all[5].Data, &del)
		if del.Port != l.Port || del.Reason != "released" || del.Lease != nil {
			t.Errorf("release event = %s", all[5].Data)
		}
		// Records registered at once share an entry (group commit) and so
		// expire together: one entry may carry several changes under one id.
		const together = 6
		var wg sync.WaitGroup
		for i := range together {
			wg.Go(func() { register(t, leader.URL, member, fmt.Sprintf("machine:x%d", i), 1000, nil) })
		}
		wg.Wait()
		more := take(t, s, 2*together)
		seen := map[string]string{}
		for _, m := range more {
			var d wire.EventResourceData
			eventData(t, m.Data, &d)
			want := map[string]string{"": "put", "put": "delete"}[seen[d.ID]]
			if m.Event != wire.EventResource || d.Op != want || (d.Op == "delete" && d.Reason != "expired") {
				t.Errorf("message %s, want a resource %s", summary(m), want)
			}
			seen[d.ID] = d.Op
		}
		all = append(all, more...)
	})

	t.Run("the leader streams the same", func(t *testing.T) {
		s := openEvents(t, nil, leader.URL, query, "?index="+strconv.FormatUint(start, 10), nil)
		hello(t, s)
		fs := openEvents(t, nil, follower.URL, query, "?index="+strconv.FormatUint(start, 10), nil)
		hello(t, fs)
		got, want := take(t, s, len(all)), take(t, fs, len(all))
		for i := range got {
			if summary(got[i]) != summary(want[i]) {
				t.Errorf("message %d: leader %s, follower %s", i, summary(got[i]), summary(want[i]))
			}
		}
		all = want
	})

	t.Run("resume without gap or duplicate", func(t *testing.T) {
		groups := 0
		history := all // each resume below adds a register to all
		for i, m := range history {
			if i > 0 && history[i-1].ID == m.ID {
				groups++
			}
			// Resume after the previous message's id: by header on odd
			// messages, by ?index on even ones.
			var s *testutil.SSEStream
			after := strconv.FormatUint(start, 10)
			if i > 0 {
				after = history[i-1].ID
			}
			if i%2 == 1 {
				s = openEvents(t, nil, follower.URL, query, "?index=1", map[string]string{"Last-Event-ID": after}) // the header wins
			} else {
				s = openEvents(t, nil, follower.URL, query, "?index="+after, nil)
			}
			if h := hello(t, s); strconv.FormatUint(h.Index, 10) != after {
				t.Fatalf("hello after %s = %+v", after, h)
			}
			var want []string
			for _, m := range all {
				if mustUint(t, m.ID) > mustUint(t, after) {
					want = append(want, summary(m))
				}
			}
			for j, m := range take(t, s, len(want)) {
				if summary(m) != want[j] {
					t.Fatalf("resume after %s, message %d = %s, want %s", after, j, summary(m), want[j])
				}
			}
			// Nothing more: the next write is the next message.
			register(t, leader.URL, member, fmt.Sprintf("machine:r%d", i), 60_000, nil)
			m := s.NextMessage(t, eventWait)
			if m.Event != wire.EventResource || !strings.Contains(m.Data, fmt.Sprintf(`"machine:r%d"`, i)) {
				t.Fatalf("resume after %s: after the history came %s, want the register of r%d", after, summary(m), i)
			}
			all = append(all, m)
			s.Close()
		}
		t.Logf("%d messages shared an id with the one before", groups)
	})

	t.Run("topic filter", func(t *testing.T) {
		s := openEvents(t, nil, follower.URL, query, "?topic=leases,tokens&index="+strconv.FormatUint(start, 10), nil)
		hello(t, s)
		want := 0
		for _, m := range all {
			if m.Event == wire.EventLease || m.Event == wire.EventToken {
				want++
			}
		}
		got := take(t, s, want)
		for _, m := range got {
			if m.Event != wire.EventLease && m.Event != wire.EventToken {
				t.Errorf("a leases,tokens stream sent %s", summary(m))
			}
		}
		// Resources are not sent; the next token is.
		register(t, leader.URL, member, "machine:quiet", 60_000, nil)
		issueToken(t, c, leader.URL, "m2")
		if m := s.NextMessage(t, eventWait); m.Event != wire.EventToken || !strings.Contains(m.Data, `"m2"`) {
			t.Errorf("after a register and an issue: %s, want only the token", summary(m))
		}
	})

	t.Run("pings", func(t *testing.T) {
		s := openEvents(t, nil, follower.URL, query, "?topic=limits", nil)
		hello(t, s)
		m, err := s.Next(eventWait)
		if err != nil || m.Comment != "ping" {
			t.Fatalf("a quiet stream sent %+v (%v), want a ping comment", m, err)
		}
	})

	t.Run("too far behind", func(t *testing.T) {
		for i := range ring + 1 {
			register(t, leader.URL, member, "machine:m1", 60_000, map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(i))})
		}
		c.WaitApplied()
		s := openEvents(t, nil, follower.URL, query, "?index="+strconv.FormatUint(start, 10), nil)
		h := hello(t, s)
		if h.Floor <= start {
			t.Fatalf("hello = %+v, want a floor above %d after %d changes", h, start, ring+1)
		}
		m := s.NextMessage(t, eventWait)
		var r wire.EventResetData
		eventData(t, m.Data, &r)
		if m.Event != wire.EventReset || r.Reason != wire.ResetTooFarBehind || r.Index < h.Floor || m.ID != strconv.FormatUint(r.Index, 10) {
			t.Fatalf("after hello: %s, want a too-far-behind reset at the present", summary(m))
		}
		register(t, leader.URL, member, "machine:after-reset", 60_000, nil)
		if m := s.NextMessage(t, eventWait); !strings.Contains(m.Data, `"machine:after-reset"`) || mustUint(t, m.ID) <= r.Index {
			t.Errorf("after the reset: %s, want the next change", summary(m))
		}
	})

	t.Run("a slow consumer is reset", func(t *testing.T) {
		// A client with a tiny receive window that stops reading: the node's
		// write to it blocks, the ring moves past its position, and the
		// stream continues with a reset once it reads again.
		dialer := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			return errors.Join(err, serr)
		}}
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext}}
		s := openEvents(t, client, follower.URL, query, "?topic=resources", nil)
		hello(t, s)
		blob, _ := json.Marshal(strings.Repeat("x", wire.MaxAttrsBytes-32))
		const machines, beats = 8, 100 // 800 events of 16 KiB: far more than the sockets hold
		for i := range machines {
			register(t, leader.URL, member, fmt.Sprintf("machine:big%d", i), 60_000, map[string]json.RawMessage{"blob": blob})
		}
		var wg sync.WaitGroup
		for i := range machines {
			wg.Go(func() {
				for range beats {
					// A heartbeat lost to a leader change (503) only makes
					// one change fewer.
					r := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: leader.URL + fmt.Sprintf("/v1/resources/machine:big%d/heartbeat", i), Auth: testutil.Bearer(member)})
					if r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable {
						t.Errorf("heartbeat: %s", r)
						return
					}
				}
			})
		}
		wg.Wait()
		c.WaitApplied()
		var last uint64
		for n := 0; ; n++ {
			m := s.NextMessage(t, eventWait)
			id := mustUint(t, m.ID)
			if id < last {
				t.Fatalf("message %d: id %d after %d", n, id, last)
			}
			last = id
			if m.Event == wire.EventReset {
				var r wire.EventResetData
				eventData(t, m.Data, &r)
				if r.Reason != wire.ResetSlowConsumer {
					t.Fatalf("reset %s, want slow-consumer", m.Data)
				}
				t.Logf("reset after %d messages", n)
				break
			}
			if n > machines*(beats+1)+1 {
				t.Fatalf("read %d messages without a reset", n)
			}
		}
		register(t, leader.URL, member, "machine:after-slow", 60_000, nil)
		for {
			if m := s.NextMessage(t, eventWait); strings.Contains(m.Data, `"machine:after-slow"`) {
				break
			}
		}
	})

	t.Run("streams hold blocking-query slots", func(t *testing.T) {
		streams := func() float64 { return regs.metric(t, fi, "elanous_event_streams") }
		c.WaitFor("no open stream", 10*time.Second, func() bool { return streams() == 0 })
		var open []*testutil.SSEStream
		for range 4 {
			s := openEvents(t, nil, follower.URL, query, "", nil)
			hello(t, s)
			open = append(open, s)
		}
		if n := streams(); n != 4 {
			t.Errorf("elanous_event_streams = %v, want 4", n)
		}
		_, r := testutil.OpenSSE(t, nil, follower.URL+"/v1/events", query, nil)
		testutil.WantError(t, "a fifth stream", r, http.StatusTooManyRequests, wire.CodeRateLimited)
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		open[0].Close()
		testutil.Poll(t, "a slot freed by a closed stream", 10*time.Second, func() error {
			s, r := testutil.OpenSSE(t, nil, follower.URL+"/v1/events", query, nil)
			if s == nil {
				return fmt.Errorf("GET /v1/events = %s", r)
			}
			s.Close()
			return nil
		})
		for _, s := range open[1:] {
			s.Close()
		}
	})

	t.Run("the stream ends cleanly at shutdown", func(t *testing.T) {
		c.WaitFor("the slots freed", 10*time.Second, func() bool { return regs.metric(t, fi, "elanous_event_streams") == 0 })
		s := openEvents(t, nil, follower.URL, query, "?topic=limits", nil)
		hello(t, s)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.StopNode(fi)
		}()
		for {
			m, err := s.Next(eventWait)
			if errors.Is(err, testutil.ErrSSEEnded) {
				break
			}
			if err != nil {
				t.Fatalf("at shutdown: %v, want the end of the body", err)
			}
			if m.Comment != "ping" {
				t.Fatalf("at shutdown: %+v", m)
			}
		}
		<-done
	})
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestEvents_Timeline covers GET /v1/cluster/timeline: it names the primary
// from the start, records a change of leader on every node (and as a
// timeline event), and a restarted node answers the same entries.
func TestEvents_Timeline(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	query := c.Tokens.Query
	li := c.Leader()
	fi := c.Follower()
	read := func(i int) wire.Timeline {
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: c.Nodes[i].URL + "/v1/cluster/timeline", Auth: testutil.Bearer(query)})
		testutil.WantStatus(t, "GET /v1/cluster/timeline", r, http.StatusOK)
		return testutil.Decode[wire.Timeline](t, r)
	}
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: c.Nodes[fi].URL + "/v1/cluster/timeline"})
	testutil.WantError(t, "GET /v1/cluster/timeline without a token", r, http.StatusUnauthorized, wire.CodeUnauthorized)

	first := c.Nodes[li].Node.FSM().Primary()
	tl := read(fi)
	if tl.Format != fsm.TimelineFormat || len(tl.Entries) == 0 {
		t.Fatalf("timeline = %+v, want format %d with the first claim", tl, fsm.TimelineFormat)
	}
	if e := tl.Entries[0]; e.Kind != "primary" || e.Holder != first.Holder || e.Generation != first.Generation || e.Index != first.Index || e.Voter != nil {
		t.Errorf("first entry = %+v, want the claim %+v", e, first)
	}

	s := openEvents(t, nil, c.Nodes[fi].URL, query, "?topic=timeline", nil)
	hello(t, s)
	r = testutil.Send(t, testutil.JSONCall(http.MethodPost, c.Nodes[li].URL+"/v1/cluster/leader/transfer", c.Tokens.Admin, wire.TransferRequest{}))
	testutil.WantStatus(t, "POST /v1/cluster/leader/transfer", r, http.StatusOK)
	var nl int
	c.WaitFor("a new leader", 10*time.Second, func() bool { nl = c.Leader(); return nl != li })
	c.WaitFor("the new leader's claim", 10*time.Second, func() bool { return c.Nodes[nl].Node.FSM().Primary().Holder == c.Nodes[nl].Machine })
	next := c.Nodes[nl].Node.FSM().Primary()
	m := s.NextMessage(t, eventWait)
	var ev wire.EventTimelineData
	eventData(t, m.Data, &ev)
	if m.Event != wire.EventTimeline || ev.Entry.Kind != "primary" || ev.Entry.Holder != next.Holder || ev.Entry.Generation != next.Generation {
		t.Errorf("timeline event %s, want the claim %+v", summary(m), next)
	}
	if next.Generation <= first.Generation {
		t.Fatalf("generation %d after the failover, was %d", next.Generation, first.Generation)
	}
	c.WaitApplied()
	want := read(nl).Entries
	if last := want[len(want)-1]; last.Kind != "primary" || last.Holder != next.Holder || last.Generation != next.Generation || last.Index != next.Index {
		t.Errorf("last entry = %+v, want the claim %+v", last, next)
	}
	same := func(i int) error {
		got := read(i).Entries
		if len(got) != len(want) {
			return fmt.Errorf("%s: %d entries, want %d", c.Nodes[i].Machine, len(got), len(want))
		}
		for k := range got {
			g, _ := json.Marshal(got[k])
			w, _ := json.Marshal(want[k])
			if string(g) != string(w) {
				return fmt.Errorf("%s: entry %d = %s, want %s", c.Nodes[i].Machine, k, g, w)
			}
		}
		return nil
	}
	for i := range c.Nodes {
		if err := same(i); err != nil {
			t.Error(err)
		}
	}
	// A restarted node answers the same entries.
	ri := 3 - li - nl
	c.StopNode(ri)
	c.RestartNode(ri)
	testutil.Poll(t, "the restarted node's timeline", 20*time.Second, func() error { return same(ri) })
}
