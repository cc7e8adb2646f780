package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestE2E_EventsAndTimeline runs the event stream and the timeline on three
// real processes: a follower streams a write and a leader SIGKILL (the new
// claim and its timeline entry), another survivor resumes from the write's
// id with the same messages, and every node, the killed one restarted,
// answers the same timeline.
func TestE2E_EventsAndTimeline(t *testing.T) {
	c, leader, before := startE2ECluster(t)
	survivors := c.running(leader)
	follower, other := survivors[0], survivors[1]
	testutil.Poll(t, "format 4 on every node", 30*time.Second, func() error { return c.atFormat(fsm.MaxFormat, c.nodes...) })

	const wait = 20 * time.Second
	s, r := testutil.OpenSSE(t, nil, follower.url+"/v1/events", c.tokens.Query, nil)
	if s == nil {
		t.Fatalf("GET /v1/events on %s = %s", follower.id, r)
	}
	if m := s.NextMessage(t, wait); m.Event != wire.EventHello {
		t.Fatalf("first message %+v, want hello", m)
	}
	testutil.Expect(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/register", c.tokens.Member, registerBody("machine:e2e-events", "e2e-events")), http.StatusOK)
	var written testutil.SSEMessage
	for written.ID == "" {
		if m := s.NextMessage(t, wait); m.Event == wire.EventResource && strings.Contains(m.Data, `"machine:e2e-events"`) {
			written = m
		}
	}

	leader.proc.kill(t)
	_, after := c.waitPrimary(leader, before.Generation, 20*time.Second)
	var history []testutil.SSEMessage // what the follower sent after the write, up to the new claim's timeline entry
	for {
		m := s.NextMessage(t, wait)
		history = append(history, m)
		if m.Event == wire.EventTimeline && strings.Contains(m.Data, `"holder":"`+after.Holder+`"`) {
			break
		}
	}
	var claim *wire.EventPrimaryData
	for _, m := range history {
		if m.Event == wire.EventPrimary {
			var p wire.EventPrimaryData
			if err := json.Unmarshal([]byte(m.Data), &p); err != nil {
				t.Fatal(err)
			}
			claim = &p
		}
	}
	if claim == nil || claim.Holder != after.Holder || claim.Generation != after.Generation || strconv.FormatUint(claim.Index, 10) == "" {
		t.Fatalf("primary event %+v, want the claim %+v", claim, after)
	}

	// The other survivor, resumed from the write's id, sends the same.
	rs, r := testutil.OpenSSE(t, nil, other.url+"/v1/events", c.tokens.Query, map[string]string{"Last-Event-ID": written.ID})
	if rs == nil {
		t.Fatalf("GET /v1/events on %s = %s", other.id, r)
	}
	if m := rs.NextMessage(t, wait); m.Event != wire.EventHello || m.ID != written.ID {
		t.Fatalf("resumed stream opened with %+v, want hello at %s", m, written.ID)
	}
	for i, want := range history {
		if got := rs.NextMessage(t, wait); got.ID != want.ID || got.Event != want.Event || got.Data != want.Data {
			t.Fatalf("resumed message %d = %+v, the follower sent %+v", i, got, want)
		}
	}

	// Every node answers the same timeline.
	timeline := func(nd *e2eNode) (string, wire.Timeline, error) {
		tl, err := queryGet[wire.Timeline](c, nd, "/v1/cluster/timeline")
		if err != nil {
			return "", tl, err
		}
		entries, err := json.Marshal(tl.Entries)
		return string(entries), tl, err
	}
	want, tl, err := timeline(follower)
	if err != nil {
		t.Fatal(err)
	}
	// The first claim starts it; the new claim follows (and the candidate
	// directory's entries, which a new leader may add after its claim).
	found := false
	for _, e := range tl.Entries[1:] {
		found = found || e.Kind == fsm.TimelinePrimary && e.Holder == after.Holder && e.Generation == after.Generation
	}
	if first := tl.Entries[0]; first.Kind != fsm.TimelinePrimary || first.Generation != before.Generation || first.Holder != before.Holder || !found {
		t.Fatalf("timeline %s, want the first claim %+v first and then the claim %+v", want, before, after)
	}
	c.start(leader)
	testutil.Poll(t, "one timeline on every node, the restarted one included", 2*wait, func() error {
		want, _, err := timeline(follower) // the directory may still be filling in
		if err != nil {
			return err
		}
		for _, nd := range c.nodes {
			got, _, err := timeline(nd)
			if err == nil && got != want {
				err = fmt.Errorf("%s answers %s, %s answers %s", nd.id, got, follower.id, want)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	s.Close()
	rs.Close()
}
