package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// listPeers reads GET /v1/cluster/peers through url.
func listPeers(t testing.TB, url, token string, consistent bool) ([]wire.Peer, testutil.Reply) {
	t.Helper()
	target := url + "/v1/cluster/peers"
	if consistent {
		target += "?consistent=true"
	}
	r := testutil.Send(t, testutil.JSONCall(http.MethodGet, target, token, nil))
	testutil.WantStatus(t, "GET "+target, r, http.StatusOK)
	return testutil.Decode[[]wire.Peer](t, r), r
}

// peerOf returns the entry of machine in peers.
func peerOf(peers []wire.Peer, machine string) (wire.Peer, bool) {
	for _, p := range peers {
		if p.Machine == machine {
			return p, true
		}
	}
	return wire.Peer{}, false
}

// waitPeers waits until every running node's local list names exactly
// machines, each a server of the Raft configuration with a directory entry.
func waitPeers(t *testing.T, c *apitest.Cluster, machines ...string) {
	t.Helper()
	slices.Sort(machines)
	for _, n := range c.Nodes {
		testutil.Poll(t, n.Machine+" lists "+strconv.Itoa(len(machines))+" peers", 10*time.Second, func() error {
			r, err := testutil.DoExpect(testutil.JSONCall(http.MethodGet, n.URL+"/v1/cluster/peers", c.Tokens.Query, nil), http.StatusOK)
			if err != nil {
				return err
			}
			var peers []wire.Peer
			if err := testutil.StrictUnmarshal(r.Body, &peers); err != nil {
				return err
			}
			var got []string
			for _, p := range peers {
				if p.Suffrage == wire.SuffrageNone || p.URL == "" || p.AddedAt == 0 {
					return fmt.Errorf("%s: %+v is not a server with a directory entry", n.Machine, p)
				}
				got = append(got, p.Machine)
			}
			if !slices.Equal(got, machines) {
				return fmt.Errorf("%s lists %v, want %v", n.Machine, got, machines)
			}
			return nil
		})
	}
}

func TestPeers_List(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	waitPeers(t, c, "node-a", "node-b", "node-c")
	leader := c.Leader()
	follower := c.Follower()
	// Issued through the follower the reads go to: it answers once it has
	// applied the token (read-your-writes), so it knows the token at once.
	machine := issueToken(t, c, c.Nodes[follower].URL, "mbp")

	// Query, member, admin and machine tokens may read it; no token may not.
	for _, tok := range []string{c.Tokens.Query, c.Tokens.Member, c.Tokens.Admin, machine.Token} {
		peers, r := listPeers(t, c.Nodes[follower].URL, tok, false)
		if len(peers) != 3 || headerUint(t, r, wire.HeaderIndex) == 0 {
			t.Fatalf("GET /v1/cluster/peers = %s, want three servers and an index", r)
		}
	}
	r := testutil.Send(t, testutil.JSONCall(http.MethodGet, c.Nodes[follower].URL+"/v1/cluster/peers", "", nil))
	testutil.WantError(t, "GET /v1/cluster/peers without a token", r, http.StatusUnauthorized, wire.CodeUnauthorized)

	// A local read on a follower: the servers, who leads, no probes.
	peers, _ := listPeers(t, c.Nodes[follower].URL, c.Tokens.Query, false)
	leaders := 0
	for _, p := range peers {
		want := c.Nodes[slices.IndexFunc(c.Nodes, func(n *apitest.Node) bool { return n.Machine == p.Machine })]
		if p.URL != want.URL || p.Suffrage != wire.SuffrageVoter || p.Promoting || p.AddedAt == 0 || p.Raft == "" {
			t.Errorf("peer %+v, want a voter at %s with an entry in the directory", p, want.URL)
		}
		if p.Health != nil {
			t.Errorf("a follower's local read has health for %s: %+v", p.Machine, p.Health)
		}
		if p.Leader {
			leaders++
			if p.Machine != c.Nodes[leader].Machine {
				t.Errorf("leader = %s, want %s", p.Machine, c.Nodes[leader].Machine)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v, want 1", leaders, peers)
	}
	// A consistent read is the leader's, with its probes of every server.
	testutil.Poll(t, "leader probed every server", 10*time.Second, func() error {
		peers, _ := listPeers(t, c.Nodes[follower].URL, c.Tokens.Query, true)
		for _, p := range peers {
			if p.Health == nil || !p.Health.Reachable || !p.Health.CaughtUp {
				return fmt.Errorf("%s health %+v, want reachable and caught up", p.Machine, p.Health)
			}
		}
		return nil
	})

	// /v1/health tells the leader how far a node has applied the log, and
	// the survivors of a dead leader where each one's log ends.
	r = testutil.Send(t, testutil.JSONCall(http.MethodGet, c.Nodes[follower].URL+"/v1/health", "", nil))
	var h struct {
		AppliedIndex  uint64  `json:"appliedIndex"`
		LastContactMs *int64  `json:"lastContactMs"`
		LastLogTerm   *uint64 `json:"lastLogTerm"`
		LastLogIndex  *uint64 `json:"lastLogIndex"`
	}
	if err := json.Unmarshal(r.Body, &h); err != nil || h.AppliedIndex == 0 || h.LastContactMs == nil || *h.LastContactMs < 0 {
		t.Errorf("GET /v1/health = %s, want appliedIndex and lastContactMs", r)
	}
	if h.LastLogTerm == nil || h.LastLogIndex == nil || *h.LastLogTerm == 0 || *h.LastLogIndex < h.AppliedIndex {
		t.Errorf("GET /v1/health = %s, want lastLogTerm and a lastLogIndex at least appliedIndex", r)
	}
}

func TestPeers_AddThroughAFollower(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	waitPeers(t, c, "node-a", "node-b", "node-c")
	follower := c.Follower()
	di, req := c.StartWaiting("node-d")
	d := c.Nodes[di]

	// A node with no Raft state and bootstrap off waits: 503 not-ready.
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: d.URL + "/v1/ready", NoRetry: true})
	testutil.WantError(t, "GET /v1/ready on a waiting node", r, http.StatusServiceUnavailable, wire.CodeNotReady)
	reg := testutil.JSONCall(http.MethodPost, d.URL+"/v1/resources/register", c.Tokens.Member, registerBody(nil))
	reg.NoRetry = true
	r = testutil.Send(t, reg)
	testutil.WantError(t, "register on a waiting node", r, http.StatusServiceUnavailable, wire.CodeNotReady)

	// Added through a follower, which forwards to the leader and answers
	// once its own list shows the new server.
	r = testutil.Send(t, testutil.JSONCall(http.MethodPost, c.Nodes[follower].URL+"/v1/cluster/peers", c.Tokens.Admin, req))
	testutil.WantStatus(t, "POST /v1/cluster/peers", r, http.StatusCreated)
	added := testutil.Decode[wire.Peer](t, r)
	if added.Machine != "node-d" || added.URL != req.URL || added.Raft != req.Raft || added.Suffrage != wire.SuffrageNonvoter || !added.Promoting {
		t.Fatalf("POST /v1/cluster/peers = %+v, want node-d as a non-voter being promoted", added)
	}
	peers, _ := listPeers(t, c.Nodes[follower].URL, c.Tokens.Query, false)
	if p, ok := peerOf(peers, "node-d"); !ok || p.URL != req.URL {
		t.Errorf("the forwarding follower's next local read = %+v, want node-d listed (read-your-writes)", peers)
	}
	// It catches up and is promoted; it serves.
	testutil.WaitFor(t, "node-d promoted", 15*time.Second, func() bool { return c.Suffrage(c.Leader(), "node-d") == wire.SuffrageVoter })
	testutil.WaitFor(t, "node-d ready", 10*time.Second, d.Node.Ready)
	waitPeers(t, c, "node-a", "node-b", "node-c", "node-d")

	// Adding it again is a no-op: 200.
	r = testutil.Send(t, testutil.JSONCall(http.MethodPost, c.Nodes[follower].URL+"/v1/cluster/peers", c.Tokens.Admin, req))
	testutil.WantStatus(t, "POST /v1/cluster/peers again", r, http.StatusOK)
	if p := testutil.Decode[wire.Peer](t, r); p.Suffrage != wire.SuffrageVoter {
		t.Errorf("repeated add = %+v, want the voter unchanged", p)
	}

	// node-d leads: nodes configured without it answer /v1/primary with its
	// url and forward writes to it.
	leader := c.Leader()
	if err := c.Nodes[leader].Node.Raft().LeadershipTransferToServer(raft.ServerID("node-d"), raft.ServerAddress(req.Raft)).Error(); err != nil {
		t.Fatalf("leadership transfer to node-d: %v", err)
	}
	testutil.WaitFor(t, "node-d leads", 10*time.Second, func() bool { return c.Leader() == di })
	for _, n := range c.Nodes[:3] {
		testutil.Poll(t, n.Machine+" names node-d primary", 10*time.Second, func() error {
			p, err := testutil.DoExpect(testutil.JSONCall(http.MethodGet, n.URL+"/v1/primary", "", nil), http.StatusOK)
			if err != nil {
				return err
			}
			var got wire.Primary
			if err := testutil.StrictUnmarshal(p.Body, &got); err != nil {
				return err
			}
			if !got.Known || got.Holder != "node-d" || got.URL != req.URL {
				return fmt.Errorf("%s /v1/primary = %+v, want node-d at %s", n.Machine, got, req.URL)
			}
			return nil
		})
		body := registerBody(func(m map[string]any) {
			m["id"], m["name"], m["machine"] = "machine:m-"+n.Machine, "m-"+n.Machine, "m-"+n.Machine
		})
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, n.URL+"/v1/resources/register", c.Tokens.Member, body))
		testutil.WantStatus(t, "register through "+n.Machine, r, http.StatusOK)
	}

	// Removed again (node-d leads and removes a follower; quorum holds).
	r = testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: c.Nodes[0].URL + "/v1/cluster/peers/node-b", Auth: testutil.Bearer(c.Tokens.Admin)})
	testutil.WantStatus(t, "DELETE /v1/cluster/peers/node-b", r, http.StatusNoContent)
	peers, _ = listPeers(t, c.Nodes[0].URL, c.Tokens.Query, false)
	if _, ok := peerOf(peers, "node-b"); ok {
		t.Errorf("node-a lists node-b right after removing it through node-a: %+v", peers)
	}
}

func TestPeers_Refusals(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	waitPeers(t, c, "node-a", "node-b", "node-c")
	leader := c.Leader()
	url := c.Nodes[leader].URL
	machine := issueToken(t, c, url, "mbp")
	base := wire.AddPeerRequest{Machine: "node-d", URL: "http://127.0.0.1:9", Raft: "127.0.0.1:9"}
	admin := c.Tokens.Admin
	before := c.Nodes[leader].Node.Peers()

	bad := []struct {
		name   string
		call   testutil.Call
		status int
		code   string
	}{
		{"query token", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", c.Tokens.Query, base), http.StatusForbidden, wire.CodeForbidden},
		{"member token", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", c.Tokens.Member, base), http.StatusForbidden, wire.CodeForbidden},
		{"machine token", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", machine.Token, base), http.StatusForbidden, wire.CodeForbidden},
		{"no token", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", "", base), http.StatusUnauthorized, wire.CodeUnauthorized},
		{"unknown field", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers", Auth: testutil.Bearer(admin),
			ContentType: "application/json", Body: `{"machine":"node-d","url":"http://127.0.0.1:9","raft":"127.0.0.1:9","voter":true}`}, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"trailing data", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers", Auth: testutil.Bearer(admin),
			ContentType: "application/json", Body: `{"machine":"node-d","url":"http://127.0.0.1:9","raft":"127.0.0.1:9"}{}`}, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"no body", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers", Auth: testutil.Bearer(admin)}, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"bad machine", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", admin, wire.AddPeerRequest{Machine: "Node_D", URL: base.URL, Raft: base.Raft}), http.StatusBadRequest, wire.CodeInvalidRequest},
		{"bad url", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", admin, wire.AddPeerRequest{Machine: "node-d", URL: "ftp://x", Raft: base.Raft}), http.StatusBadRequest, wire.CodeInvalidRequest},
		{"bad raft", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", admin, wire.AddPeerRequest{Machine: "node-d", URL: base.URL, Raft: "no-port"}), http.StatusBadRequest, wire.CodeInvalidRequest},
		{"raft address taken", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", admin, wire.AddPeerRequest{Machine: "node-d", URL: base.URL, Raft: before[1].Raft}), http.StatusConflict, wire.CodePeerExists},
		{"url taken", testutil.JSONCall(http.MethodPost, url+"/v1/cluster/peers", admin, wire.AddPeerRequest{Machine: "node-d", URL: before[1].URL, Raft: base.Raft}), http.StatusConflict, wire.CodePeerExists},
		{"remove unknown", testutil.Call{Method: http.MethodDelete, URL: url + "/v1/cluster/peers/node-x", Auth: testutil.Bearer(admin)}, http.StatusNotFound, wire.CodeNotFound},
		{"remove bad name", testutil.Call{Method: http.MethodDelete, URL: url + "/v1/cluster/peers/Node_X", Auth: testutil.Bearer(admin)}, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"remove bad force", testutil.Call{Method: http.MethodDelete, URL: url + "/v1/cluster/peers/node-b?force=maybe", Auth: testutil.Bearer(admin)}, http.StatusBadRequest, wire.CodeInvalidRequest},
		{"remove with query token", testutil.Call{Method: http.MethodDelete, URL: url + "/v1/cluster/peers/node-b", Auth: testutil.Bearer(c.Tokens.Query)}, http.StatusForbidden, wire.CodeForbidden},
		{"promote unknown", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers/node-x/promote", Auth: testutil.Bearer(admin)}, http.StatusNotFound, wire.CodeNotFound},
		{"demote unknown", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers/node-x/demote", Auth: testutil.Bearer(admin)}, http.StatusNotFound, wire.CodeNotFound},
		{"demote with member token", testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers/node-b/demote", Auth: testutil.Bearer(c.Tokens.Member)}, http.StatusForbidden, wire.CodeForbidden},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			r := testutil.Send(t, tt.call)
			testutil.WantError(t, tt.name, r, tt.status, tt.code)
		})
	}
	after := c.Nodes[leader].Node.Peers()
	if len(after) != len(before) {
		t.Fatalf("peers after refused requests = %+v, want unchanged %+v", after, before)
	}
	for i := range before {
		if before[i].Candidate != after[i].Candidate || before[i].Suffrage != after[i].Suffrage {
			t.Errorf("peer %d after refused requests = %+v, want %+v", i, after[i], before[i])
		}
	}
}

func TestPeers_QuorumCheck(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	waitPeers(t, c, "node-a", "node-b", "node-c")
	leader := c.Leader()
	var fs []int
	for i := range c.Nodes {
		if i != leader {
			fs = append(fs, i)
		}
	}
	// The API of one follower stops answering (its Raft node runs on): the
	// leader cannot count it as reachable.
	silent, other := c.Nodes[fs[0]], c.Nodes[fs[1]]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := silent.Server.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	url := c.Nodes[leader].URL
	del := func(machine, query string) testutil.Reply {
		return testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: url + "/v1/cluster/peers/" + machine + query, Auth: testutil.Bearer(c.Tokens.Admin)})
	}
	r := del(other.Machine, "")
	testutil.WantError(t, "DELETE the answering follower", r, http.StatusConflict, wire.CodeQuorumAtRisk)
	if c.Suffrage(leader, other.Machine) != wire.SuffrageVoter {
		t.Fatalf("%s is no longer a voter after a refused removal", other.Machine)
	}
	demote := testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: url + "/v1/cluster/peers/" + other.Machine + "/demote", Auth: testutil.Bearer(c.Tokens.Admin)})
	testutil.WantError(t, "demote the answering follower", demote, http.StatusConflict, wire.CodeQuorumAtRisk)

	r = del(other.Machine, "?force=true")
	testutil.WantStatus(t, "DELETE with force", r, http.StatusNoContent)
	if s := c.Suffrage(leader, other.Machine); s != "" {
		t.Errorf("%s suffrage after a forced removal = %q, want none", other.Machine, s)
	}
}

// With mutual TLS Raft a node admits only peers its candidate set names:
// a server added with peers add is admitted by every node (the set comes
// from the replicated directory, no configuration edit), catches up and
// takes part in the quorum.
func TestPeers_AddOverTLS(t *testing.T) {
	c := apitest.Start(t, tlsOptions())
	client := c.PKI.HTTPClient("")
	di, req := c.StartWaiting("node-d")
	f := c.Nodes[c.Follower()]
	body, _ := json.Marshal(req)
	added, err := testutil.Do(testutil.Call{Method: http.MethodPost, URL: f.URL + "/v1/cluster/peers", Auth: testutil.Bearer(c.Tokens.Admin),
		Body: string(body), ContentType: "application/json", Client: client})
	if err != nil || added.Status != http.StatusCreated {
		t.Fatalf("POST /v1/cluster/peers over https = %v, %v; want 201", added, err)
	}
	testutil.WaitFor(t, "node-d promoted", 15*time.Second, func() bool { return c.Suffrage(c.Leader(), "node-d") == wire.SuffrageVoter })
	testutil.WaitFor(t, "node-d ready", 10*time.Second, c.Nodes[di].Node.Ready)
	for _, n := range c.Nodes[:3] {
		if _, ok := n.Node.Candidate("node-d"); !ok {
			t.Errorf("%s does not resolve node-d", n.Machine)
		}
	}
	// node-d takes part in the quorum: with one of the first three stopped,
	// a write needs three acknowledgements of four voters, node-d's among
	// them, over mutual TLS.
	leader := c.Leader()
	for i := range c.Nodes[:3] {
		if i != leader {
			c.StopNode(i)
			break
		}
	}
	r := c.Leader()
	acquired, err := testutil.Do(clientAcquire(client, c.Nodes[r].URL, c.Tokens.Member))
	if err != nil || acquired.Status != http.StatusCreated {
		t.Fatalf("acquire with node-d in the quorum = %v, %v; want 201", acquired, err)
	}
}

// Membership changes are admin actions: one audit line each, on the leader,
// naming the machine (and force), never a token.
func TestPeers_Audit(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	li, fi := c.Leader(), c.Follower()
	leader, follower := c.Nodes[li], c.Nodes[fi]
	testutil.Expect(t, testutil.Call{Method: http.MethodDelete, URL: follower.URL + "/v1/cluster/peers/node-x?force=true",
		Auth: testutil.Bearer(c.Tokens.Admin)}, http.StatusNotFound)
	testutil.Expect(t, testutil.Call{Method: http.MethodPost, URL: follower.URL + "/v1/cluster/peers/" + follower.Machine + "/promote",
		Auth: testutil.Bearer(c.Tokens.Admin)}, http.StatusOK)
	text := c.audit.String()
	if strings.Contains(text, c.Tokens.Admin) {
		t.Fatalf("the audit log holds the admin token:\n%s", text)
	}
	want := []struct {
		action, outcome, machine string
		status                   float64
	}{
		{"peers.remove", wire.CodeNotFound, "node-x", 404},
		{"peers.promote", "ok", follower.Machine, 200},
	}
	lines := c.audit.JSONLines(t)
	for _, w := range want {
		found := 0
		for _, l := range lines {
			if l["action"] == w.action && l["outcome"] == w.outcome && l["machine"] == w.machine && l["status"] == w.status &&
				l["node"] == leader.Machine && l["token"] == fingerprint(c.Tokens.Admin) {
				found++
			}
		}
		if found != 1 {
			t.Errorf("audit lines for %s %s of %s on %s: %d, want 1:\n%s", w.action, w.outcome, w.machine, leader.Machine, found, text)
		}
	}
}
