package api_test

import (
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// blockingGet starts a blocking GET on another goroutine and returns a
// channel with its reply (status 0 and the error text on a transport error)
// and a channel closed once the request is on the wire.
func blockingGet(c testutil.Call) (<-chan testutil.Reply, <-chan struct{}) {
	out := make(chan testutil.Reply, 1)
	wrote := make(chan struct{})
	var once sync.Once
	c.OnWrote = func() { once.Do(func() { close(wrote) }) }
	go func() {
		r, err := testutil.Do(c)
		if err != nil {
			r = testutil.Reply{Body: []byte(err.Error())}
			once.Do(func() { close(wrote) })
		}
		out <- r
	}()
	return out, wrote
}

// TestServer_Reads covers the read side of the HTTP contract (ARCHITECTURE.md, "The HTTP contract"): read headers,
// linearizable reads through a follower, blocking queries, /v1/primary,
// /v1/ready, /metrics, /v1/cluster/status, and /v1/primary after the leader
// stops. The subtests share one cluster and run in order; the last stops the
// leader.
func TestServer_Reads(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	query, memberToken := c.Tokens.Query, c.Tokens.Member
	li := c.Leader()
	leader := c.Nodes[li]

	t.Run("cluster status", func(t *testing.T) {
		// First, while no TTL is live and so no sweep appends entries.
		c.WaitApplied()
		var hashes []string
		for _, n := range c.Nodes {
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/cluster/status", Auth: testutil.Bearer(query)})
			testutil.WantStatus(t, "GET /v1/cluster/status on "+n.Machine, r, http.StatusOK)
			st := testutil.Decode[wire.ClusterStatus](t, r)
			voters := 0
			for _, s := range st.Configuration {
				if s.Suffrage == "Voter" {
					voters++
				}
			}
			if voters != 3 || len(st.Configuration) != 3 || !st.Voter {
				t.Errorf("%s: configuration %+v (voter %v), want 3 voters including this node", n.Machine, st.Configuration, st.Voter)
			}
			if st.Machine != n.Machine || st.URL != n.URL || st.Leader != leader.Machine || st.LeaderURL != leader.URL || !st.Ready {
				t.Errorf("%s: status machine=%s url=%s leader=%s leaderUrl=%s ready=%v, want %s %s %s %s true",
					n.Machine, st.Machine, st.URL, st.Leader, st.LeaderURL, st.Ready, n.Machine, n.URL, leader.Machine, leader.URL)
			}
			if st.StateHash == "" || st.StateHash != n.Node.FSM().Hash() {
				t.Errorf("%s: stateHash %q, want the node's FSM hash %q", n.Machine, st.StateHash, n.Node.FSM().Hash())
			}
			hashes = append(hashes, st.StateHash)
		}
		for i := range hashes {
			if hashes[i] != hashes[0] {
				t.Fatalf("stateHash differs across nodes after WaitApplied: %v", hashes)
			}
		}
	})

	t.Run("read headers", func(t *testing.T) {
		l := acquire(t, leader.URL, memberToken, wire.AcquireRequest{Machine: "reader", Purpose: "headers", TTLMs: memberTTL})
		c.WaitApplied()
		for _, n := range c.Nodes {
			gen := n.Node.FSM().Primary().Generation
			for _, path := range []string{"/v1/resources", "/v1/leases/port", "/v1/primary"} {
				r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + path, Auth: testutil.Bearer(query)})
				what := "GET " + path + " on " + n.Machine
				testutil.WantStatus(t, what, r, http.StatusOK)
				if got := headerUint(t, r, wire.HeaderGeneration); got != gen || gen == 0 {
					t.Errorf("%s: %s = %d, want %d", what, wire.HeaderGeneration, got, gen)
				}
				index := headerUint(t, r, wire.HeaderIndex)
				switch path {
				case "/v1/primary":
					if want := n.Node.FSM().Primary().Index; index != want {
						t.Errorf("%s: %s = %d, want the claim's index %d", what, wire.HeaderIndex, index, want)
					}
				case "/v1/leases/port":
					if index != l.Fence {
						t.Errorf("%s: %s = %d, want the acquire's index %d", what, wire.HeaderIndex, index, l.Fence)
					}
				}
				if got := r.Header.Get(wire.HeaderKnownLeader); got != "true" {
					t.Errorf("%s: %s = %q, want true", what, wire.HeaderKnownLeader, got)
				}
				ms, err := strconv.ParseInt(r.Header.Get(wire.HeaderLastContactMs), 10, 64)
				switch {
				case err != nil:
					t.Errorf("%s: %s = %q: %v", what, wire.HeaderLastContactMs, r.Header.Get(wire.HeaderLastContactMs), err)
				case n == leader && ms != 0:
					t.Errorf("%s: %s = %d on the leader, want 0", what, wire.HeaderLastContactMs, ms)
				case ms < 0:
					t.Errorf("%s: %s = %d on a follower, want >= 0", what, wire.HeaderLastContactMs, ms)
				}
			}
		}
		releaseAll(t, c)
	})

	follower := c.Nodes[c.Follower()]

	t.Run("consistent read through a follower", func(t *testing.T) {
		defer releaseAll(t, c)
		for i := range 10 {
			id := fmt.Sprintf("instance:consistent/%d", i)
			r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/register", memberToken, wire.RegisterRequest{
				ID: id, Kind: "instance", Name: id, Machine: "reader", TTLMs: memberTTL,
			}))
			testutil.WantStatus(t, "register through the leader", r, http.StatusOK)
			r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/resources/" + member.EscapeID(id) + "?consistent=true", Auth: testutil.Bearer(query)})
			testutil.WantStatus(t, "consistent GET of "+id+" through a follower", r, http.StatusOK)
			if got := testutil.Decode[wire.Resource](t, r); got.ID != id {
				t.Fatalf("consistent GET = %+v, want %s", got, id)
			}
			l := acquire(t, leader.URL, memberToken, wire.AcquireRequest{Machine: "reader", Purpose: "consistent", TTLMs: memberTTL})
			r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/leases/port/" + strconv.Itoa(l.Port) + "?consistent=true", Auth: testutil.Bearer(query)})
			testutil.WantStatus(t, "consistent GET of the lease through a follower", r, http.StatusOK)
			if got := testutil.Decode[wire.PortLease](t, r); got != l {
				t.Fatalf("consistent GET of port %d = %+v, want %+v", l.Port, got, l)
			}
			if got := headerUint(t, r, wire.HeaderIndex); got < l.Fence {
				t.Fatalf("consistent GET %s = %d, want >= %d", wire.HeaderIndex, got, l.Fence)
			}
		}
	})

	t.Run("blocking query wakes on a change", func(t *testing.T) {
		defer releaseAll(t, c)
		c.WaitApplied() // the releases of the last subtest are applied: the next change is ours
		r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/leases/port", Auth: testutil.Bearer(query)})
		n := headerUint(t, r, wire.HeaderIndex)
		const wait = 5 * time.Second
		out, wrote := blockingGet(testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/leases/port?index=%d&wait=%s", follower.URL, n, wait), Auth: testutil.Bearer(query)})
		<-wrote
		l := acquire(t, leader.URL, memberToken, wire.AcquireRequest{Machine: "reader", Purpose: "wake", TTLMs: memberTTL})
		got := <-out
		testutil.WantStatus(t, "blocking GET", got, http.StatusOK)
		if idx := headerUint(t, got, wire.HeaderIndex); idx <= n {
			t.Fatalf("blocking GET %s = %d, want > %d", wire.HeaderIndex, idx, n)
		}
		if !strings.Contains(string(got.Body), l.LeaseID) {
			t.Fatalf("blocking GET body %s does not hold the new lease %s", got.Body, l.LeaseID)
		}
		if got.Elapsed >= wait/2 {
			t.Fatalf("blocking GET returned after %v, want well under the wait %v", got.Elapsed, wait)
		}
		t.Logf("blocking GET woke %v after it was sent", got.Elapsed)
	})

	t.Run("blocking query times out unchanged", func(t *testing.T) {
		c.WaitApplied()
		for _, n := range []*apitest.Node{leader, follower} {
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/leases/port", Auth: testutil.Bearer(query)})
			idx := headerUint(t, r, wire.HeaderIndex)
			const wait = 300 * time.Millisecond
			got := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/leases/port?index=%d&wait=300ms", n.URL, idx), Auth: testutil.Bearer(query)})
			testutil.WantStatus(t, "blocking GET", got, http.StatusOK)
			if after := headerUint(t, got, wire.HeaderIndex); after != idx {
				t.Fatalf("blocking GET on %s returned index %d, want the same %d", n.Machine, after, idx)
			}
			if got.Elapsed < wait {
				t.Fatalf("blocking GET on %s returned after %v, before the wait %v", n.Machine, got.Elapsed, wait)
			}
		}
	})

	t.Run("resource heartbeat does not wake a primary watcher", func(t *testing.T) {
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/register", memberToken, wire.RegisterRequest{
			ID: "machine:watched", Kind: "machine", Name: "watched", Machine: "watched", TTLMs: memberTTL,
		}))
		testutil.WantStatus(t, "register", r, http.StatusOK)
		r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/primary"})
		n := headerUint(t, r, wire.HeaderIndex)
		resBefore := follower.Node.FSM().Index(fsm.TableResources)
		const wait = 500 * time.Millisecond
		out, wrote := blockingGet(testutil.Call{Method: http.MethodGet, URL: fmt.Sprintf("%s/v1/primary?index=%d&wait=500ms", follower.URL, n)})
		<-wrote
		heartbeats := 0
		var got testutil.Reply
	loop:
		for {
			select {
			case got = <-out:
				break loop
			default:
			}
			hb := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/machine%3Awatched/heartbeat", memberToken, map[string]any{"attrs": map[string]int{"n": heartbeats}}))
			testutil.WantStatus(t, "heartbeat", hb, http.StatusOK)
			heartbeats++
		}
		testutil.WantStatus(t, "blocking GET /v1/primary", got, http.StatusOK)
		if after := headerUint(t, got, wire.HeaderIndex); after != n {
			t.Fatalf("blocking GET /v1/primary returned index %d, want the same %d", after, n)
		}
		if got.Elapsed < wait {
			t.Fatalf("blocking GET /v1/primary returned after %v (woken by a heartbeat?), want the whole wait %v", got.Elapsed, wait)
		}
		if heartbeats == 0 || follower.Node.FSM().Index(fsm.TableResources) == resBefore {
			t.Fatalf("no heartbeat reached the follower while the watcher waited (%d sent)", heartbeats)
		}
		t.Logf("%d heartbeats during the wait did not wake /v1/primary", heartbeats)
	})

	t.Run("primary known on every node", func(t *testing.T) {
		gen := leader.Node.FSM().Primary().Generation
		for _, n := range c.Nodes {
			var p wire.Primary
			testutil.WaitFor(t, n.Machine+" to report known:true", 5*time.Second, func() bool {
				r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary"})
				testutil.WantStatus(t, "GET /v1/primary", r, http.StatusOK)
				p = testutil.Decode[wire.Primary](t, r)
				return p.Known
			})
			if p.Holder != leader.Machine || p.URL != leader.URL || p.Generation != gen || gen < 1 {
				t.Errorf("GET /v1/primary on %s = %+v, want holder %s url %s generation %d", n.Machine, p, leader.Machine, leader.URL, gen)
			}
		}
	})

	t.Run("health and ready", func(t *testing.T) {
		for _, n := range c.Nodes {
			for _, path := range []string{"/v1/health", "/v1/ready"} {
				r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + path})
				testutil.WantStatus(t, "GET "+path+" on "+n.Machine, r, http.StatusOK)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for _, n := range c.Nodes {
			testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/health"}) // at least one request counted
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/metrics"})
			testutil.WantStatus(t, "GET /metrics on "+n.Machine, r, http.StatusOK)
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "text/plain" {
				t.Errorf("GET /metrics Content-Type = %q, want text/plain", r.Header.Get("Content-Type"))
			}
			for _, name := range []string{"elanous_raft_term", "elanous_http_requests_total"} {
				if !strings.Contains(string(r.Body), "\n"+name) {
					t.Errorf("GET /metrics on %s lacks %s", n.Machine, name)
				}
			}
		}
	})

	t.Run("primary after the leader stops", func(t *testing.T) {
		gen := leader.Node.FSM().Primary().Generation
		c.StopNode(li)
		var holders []string
		for i, n := range c.Nodes {
			if i == li {
				continue
			}
			var p wire.Primary
			var r testutil.Reply
			testutil.WaitFor(t, n.Machine+" to serve a higher generation", 10*time.Second, func() bool {
				r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary"})
				p = testutil.Decode[wire.Primary](t, r)
				return p.Known && p.Generation > gen
			})
			if h := headerUint(t, r, wire.HeaderGeneration); h != p.Generation {
				t.Errorf("%s: %s = %d, want %d", n.Machine, wire.HeaderGeneration, h, p.Generation)
			}
			if p.Holder == leader.Machine {
				t.Errorf("%s: holder is still the stopped %s", n.Machine, leader.Machine)
			}
			holders = append(holders, fmt.Sprintf("%s@%d", p.Holder, p.Generation))
		}
		if holders[0] != holders[1] {
			t.Fatalf("survivors disagree on the primary: %v", holders)
		}
	})
}
