package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

func TestNode_DirectorySeededFromConfiguration(t *testing.T) {
	tc, _ := newMembershipCluster(t, 3)
	tc.readyLeader()
	tc.waitDirectory("node-a", "node-b", "node-c")
	for i, n := range tc.nodes {
		dir := n.FSM().Candidates()
		for _, c := range dir {
			conf, _ := n.configured(c.Machine)
			if c.URL != conf.URL || c.Raft != conf.Raft || !c.Voter {
				t.Errorf("node %d directory entry %+v, want the configured %+v as a voter", i, c, conf)
			}
		}
		got := n.Candidates()
		if len(got) != 3 {
			t.Errorf("node %d Candidates() = %+v, want the three seeded", i, got)
		}
	}
}

func TestNode_Candidates_BeforeTheDirectory(t *testing.T) {
	// A cluster held at format 1 has no directory: the configuration is the source.
	p := newProbes()
	tc := newTestCluster(t, 3, func(i int, c *Config) {
		membershipTweak(p)(i, c)
		c.FormatProbe = func(context.Context, Candidate) (int, error) { return 1, nil }
	})
	p.register(tc.nodes...)
	li, leader := tc.leader()
	if got := leader.FSM().Format(); got != 1 {
		t.Fatalf("Format() = %d, want 1 (held by the probe)", got)
	}
	got := leader.Candidates()
	want := tc.cfgs[li].Candidates
	if len(got) != len(want) {
		t.Fatalf("Candidates() = %+v, want the configured %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Candidates()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	_, spec := tc.addWaiting("node-d", p)
	if _, err := leader.AddPeer(context.Background(), spec); !errors.Is(err, ErrDirectoryFormat) {
		t.Fatalf("AddPeer() at format 1 error = %v, want ErrDirectoryFormat", err)
	}
	if tc.suffrage(li, "node-d") != "" {
		t.Errorf("node-d is in the raft configuration after a refused AddPeer")
	}
}

func TestNode_AddPeer_PromotesOnceCaughtUp(t *testing.T) {
	tc, p, li := newSeededMembership(t)
	leader := tc.nodes[li]
	ctx := context.Background()
	for i := range 10 {
		mustPropose(t, leader, acquire("o"+string(rune('a'+i)), 60_000))
	}

	di, spec := tc.addWaiting("node-d", p)
	d := tc.nodes[di]
	if !d.Waiting() || d.Ready() {
		t.Fatalf("a node without state and bootstrap off: Waiting() = %v, Ready() = %v; want true, false", d.Waiting(), d.Ready())
	}
	p.setDown("node-d", true) // not caught up as far as the leader can tell
	change, err := leader.AddPeer(ctx, spec)
	if err != nil {
		t.Fatalf("AddPeer() error = %v", err)
	}
	if !change.Created || change.Peer.Suffrage != SuffrageNonvoter || !change.Peer.WantVoter || change.Peer.URL != spec.URL {
		t.Fatalf("AddPeer() = %+v, want a new non-voter that wants to vote, at %s", change, spec.URL)
	}
	if got := leader.FSM().AppliedIndex(); got < change.Index {
		t.Errorf("leader applied %d < the change's index %d", got, change.Index)
	}
	// While the probe cannot reach it, it stays a non-voter, pass after pass.
	p.waitProbes(t, "node-d", 5)
	if s := tc.suffrage(li, "node-d"); s != SuffrageNonvoter {
		t.Fatalf("node-d suffrage = %q while unreachable, want nonvoter", s)
	}
	p.setDown("node-d", false)
	testutil.WaitFor(t, "node-d promoted", 10*time.Second, func() bool { return tc.suffrage(li, "node-d") == SuffrageVoter })
	testutil.WaitFor(t, "node-d ready", 10*time.Second, d.Ready)
	if d.Waiting() {
		t.Errorf("node-d Waiting() = true after it was added")
	}
	leader = tc.nodes[tc.readyLeader()] // the same one, unless the machine was too slow for it
	testutil.WaitFor(t, "the leader's probe shows node-d caught up", 5*time.Second, func() bool {
		h := leader.peerHealth("node-d")
		return h != nil && h.Reachable && !h.CaughtUpSince.IsZero()
	})
	// Every node resolves node-d from the directory, node-d included.
	tc.waitDirectory("node-a", "node-b", "node-c", "node-d")
	for i, n := range tc.nodes {
		c, ok := n.Candidate("node-d")
		if !ok || c.URL != spec.URL || c.Raft != spec.Raft {
			t.Errorf("node %d Candidate(node-d) = %+v, %v; want %+v", i, c, ok, spec)
		}
	}
	if got := d.FSM().Leases(); len(got) != 10 {
		t.Errorf("node-d holds %d leases, want the 10 written before it joined", len(got))
	}

	// Adding it again changes nothing.
	again, err := leader.AddPeer(ctx, spec)
	if err != nil || again.Created {
		t.Fatalf("AddPeer() again = %+v, %v; want an unchanged server", again, err)
	}
	if s := tc.suffrage(li, "node-d"); s != SuffrageVoter {
		t.Errorf("node-d suffrage after a repeated add = %q, want voter", s)
	}
}

// An add that stopped between its two steps (the server is a non-voter in
// the Raft configuration, with no directory entry: the leader was lost, the
// client retries) is completed by the next AddPeer with that call's intent.
func TestNode_AddPeer_CompletesAnInterruptedAdd(t *testing.T) {
	tc, p, li := newSeededMembership(t)
	leader := tc.nodes[li]
	_, spec := tc.addWaiting("node-d", p)
	if err := leader.raft.AddNonvoter(raft.ServerID(spec.Machine), raft.ServerAddress(spec.Raft), 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("AddNonvoter() error = %v", err)
	}
	change, err := leader.AddPeer(context.Background(), spec)
	if err != nil || change.Created || !change.Peer.WantVoter {
		t.Fatalf("AddPeer() after an interrupted add = %+v, %v; want the existing server, wanting to vote", change, err)
	}
	testutil.WaitFor(t, "node-d promoted", 10*time.Second, func() bool { return tc.suffrage(li, "node-d") == SuffrageVoter })
}

func TestNode_AddPeer_Nonvoter(t *testing.T) {
	tc, p, li := newSeededMembership(t)
	leader := tc.nodes[li]
	_, spec := tc.addWaiting("node-d", p)
	spec.Nonvoter = true
	if _, err := leader.AddPeer(context.Background(), spec); err != nil {
		t.Fatalf("AddPeer(nonvoter) error = %v", err)
	}
	testutil.WaitFor(t, "node-d caught up longer than the stabilization time", 10*time.Second, func() bool {
		return leader.caughtUpFor("node-d") > tc.cfgs[li].ServerStabilization
	})
	p.waitProbes(t, "node-d", 3)
	if s := tc.suffrage(li, "node-d"); s != SuffrageNonvoter {
		t.Fatalf("node-d added with Nonvoter has suffrage %q, want nonvoter", s)
	}
	change, err := leader.PromotePeer(context.Background(), "node-d")
	if err != nil || change.Peer.Suffrage != SuffrageVoter || !change.Peer.WantVoter {
		t.Fatalf("PromotePeer() = %+v, %v; want a voter", change, err)
	}
}

func TestNode_AddPeer_Refusals(t *testing.T) {
	tc, p, li := newSeededMembership(t)
	leader := tc.nodes[li]
	fi := tc.others(li)[0]
	_, spec := tc.addWaiting("node-d", p)
	ctx := context.Background()
	before := leader.raftServers()
	b := tc.cfgs[0].Candidates[1]
	tests := []struct {
		name string
		spec PeerSpec
		want error
	}{
		{"raft address of another server", PeerSpec{Machine: "node-d", URL: spec.URL, Raft: b.Raft}, ErrPeerExists},
		{"url of another server", PeerSpec{Machine: "node-d", URL: b.URL, Raft: spec.Raft}, ErrPeerExists},
		{"existing server at another address", PeerSpec{Machine: b.Machine, URL: b.URL, Raft: spec.Raft}, ErrPeerExists},
		{"bad name", PeerSpec{Machine: "Node_D", URL: spec.URL, Raft: spec.Raft}, fsm.ErrInvalidCommand},
		{"bad url", PeerSpec{Machine: "node-d", URL: "ftp://x", Raft: spec.Raft}, fsm.ErrInvalidCommand},
		{"bad raft address", PeerSpec{Machine: "node-d", URL: spec.URL, Raft: "nowhere"}, fsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := leader.AddPeer(ctx, tt.spec); !errors.Is(err, tt.want) {
				t.Errorf("AddPeer(%+v) error = %v, want %v", tt.spec, err, tt.want)
			}
		})
	}
	if _, err := tc.nodes[fi].AddPeer(ctx, spec); !errors.Is(err, ErrNotLeader) {
		t.Errorf("AddPeer() on a follower error = %v, want ErrNotLeader", err)
	}
	if after := leader.raftServers(); len(after) != len(before) {
		t.Errorf("raft configuration after refused adds = %v, want %v", after, before)
	}
	if got := len(leader.FSM().Candidates()); got != 3 {
		t.Errorf("directory after refused adds has %d entries, want 3", got)
	}
}

func TestNode_RemovePeer_Quorum(t *testing.T) {
	tc, li, up, down := newSeededOneDown(t)
	leader := tc.nodes[li]
	live, dead := tc.nodes[up].ID(), tc.nodes[down].ID()
	ctx := context.Background()

	// Removing the live follower would leave {leader, dead}: one of two answers.
	_, err := leader.RemovePeer(ctx, live, false)
	if !errors.Is(err, ErrQuorumAtRisk) {
		t.Fatalf("RemovePeer(%s) with %s down error = %v, want ErrQuorumAtRisk", live, dead, err)
	}
	if tc.suffrage(li, live) != SuffrageVoter || len(leader.FSM().Candidates()) != 3 {
		t.Fatalf("a refused removal changed the configuration or the directory")
	}
	// Removing the dead one leaves {leader, live}: both answer.
	change, err := leader.RemovePeer(ctx, dead, false)
	if err != nil {
		t.Fatalf("RemovePeer(%s) error = %v", dead, err)
	}
	if tc.suffrage(li, dead) != "" {
		t.Errorf("%s still in the raft configuration after RemovePeer", dead)
	}
	for _, i := range []int{li, up} {
		n := tc.nodes[i]
		testutil.WaitFor(t, n.ID()+" applied the removal", 5*time.Second, func() bool { return n.FSM().AppliedIndex() >= change.Index })
		if _, ok := n.Candidate(dead); ok {
			t.Errorf("%s still resolves %s after its removal", n.ID(), dead)
		}
	}
	if _, err := leader.RemovePeer(ctx, "node-x", false); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("RemovePeer(unknown) error = %v, want ErrUnknownPeer", err)
	}
}

func TestNode_RemovePeer_Force(t *testing.T) {
	tc, li, up, down := newSeededOneDown(t)
	leader := tc.nodes[li]
	a := tc.nodes[up].ID()
	if _, err := leader.RemovePeer(context.Background(), a, true); err != nil {
		t.Fatalf("RemovePeer(%s, force) error = %v", a, err)
	}
	if tc.suffrage(li, a) != "" {
		t.Errorf("%s still a server after a forced removal", a)
	}
	tc.waitForgets(a, 5*time.Second, li, down)
}

func TestNode_RemovePeer_LastVoter(t *testing.T) {
	tc, _ := newMembershipCluster(t, 1)
	_, leader := tc.leader()
	testutil.WaitFor(t, "directory seeded", 5*time.Second, func() bool { return len(leader.FSM().Candidates()) == 1 })
	if _, err := leader.RemovePeer(context.Background(), leader.ID(), true); !errors.Is(err, ErrQuorumAtRisk) {
		t.Fatalf("RemovePeer(the last voter, force) error = %v, want ErrQuorumAtRisk", err)
	}
}

func TestNode_RemovePeer_Leader(t *testing.T) {
	tc, _, li := newSeededMembership(t)
	old := tc.nodes[li].ID()
	if _, err := tc.nodes[li].RemovePeer(context.Background(), old, false); err != nil {
		t.Fatalf("RemovePeer(the leader itself) error = %v", err)
	}
	ni := tc.readyLeader(li)
	if ni == li {
		t.Fatalf("the removed leader still leads")
	}
	// The next leader drops the old leader's entry.
	tc.waitForgets(old, 10*time.Second, tc.others(li)...)
}

func TestNode_DemotePromote(t *testing.T) {
	tc, p, li := newSeededMembership(t)
	leader := tc.nodes[li]
	f := tc.nodes[tc.others(li)[0]].ID()
	ctx := context.Background()
	change, err := leader.DemotePeer(ctx, f, false)
	if err != nil || change.Peer.Suffrage != SuffrageNonvoter || change.Peer.WantVoter {
		t.Fatalf("DemotePeer(%s) = %+v, %v; want a non-voter that stays one", f, change, err)
	}
	// The maintenance does not promote it back, however caught up it is.
	testutil.WaitFor(t, f+" caught up longer than the stabilization time", 10*time.Second, func() bool {
		return leader.caughtUpFor(f) > tc.cfgs[li].ServerStabilization
	})
	p.waitProbes(t, f, 3)
	if s := tc.suffrage(li, f); s != SuffrageNonvoter {
		t.Fatalf("%s suffrage after demotion and maintenance = %q, want nonvoter", f, s)
	}
	// Demoting the other follower would leave the leader alone of {leader}:
	// a quorum of one, allowed; with it down the quorum check refuses.
	g := tc.nodes[tc.others(li)[1]].ID()
	p.setDown(g, true)
	if _, err := leader.DemotePeer(ctx, leader.ID(), false); !errors.Is(err, ErrQuorumAtRisk) {
		t.Errorf("DemotePeer(leader) with the only other voter down error = %v, want ErrQuorumAtRisk", err)
	}
	p.setDown(g, false)
	change, err = leader.PromotePeer(ctx, f)
	if err != nil || change.Peer.Suffrage != SuffrageVoter {
		t.Fatalf("PromotePeer(%s) = %+v, %v; want a voter", f, change, err)
	}
	if _, err := leader.PromotePeer(ctx, "node-x"); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("PromotePeer(unknown) error = %v, want ErrUnknownPeer", err)
	}
}

func TestNode_Maintain_DropsStaleEntries(t *testing.T) {
	tc, _, li := newSeededMembership(t)
	leader := tc.nodes[li]
	l, err := leader.readyLeadership()
	if err != nil {
		t.Fatal(err)
	}
	// An entry whose server is not in the Raft configuration (an add
	// interrupted after the directory write, a configuration rewritten by
	// recover) is dropped by the leader.
	stale := fsm.PutCandidate{Header: fsm.Header{Now: l.now()},
		Candidate: fsm.Candidate{Machine: "node-x", URL: "http://127.0.0.1:9", Raft: "127.0.0.1:9", Voter: true}}
	if _, err := leader.apply(context.Background(), stale, 0); err != nil {
		t.Fatalf("apply PutCandidate(node-x) error = %v", err)
	}
	tc.waitDirectory("node-a", "node-b", "node-c")
}

func TestNode_ForwardTargetFollowsTheDirectory(t *testing.T) {
	// node-d is in no node's configuration but its own: once added, every
	// node resolves it as leader from the directory.
	tc, p, li := newSeededMembership(t)
	di, spec := tc.addWaiting("node-d", p)
	for i := 0; i < di; i++ {
		if _, ok := tc.nodes[i].configured("node-d"); ok {
			t.Fatalf("node %d is configured with node-d; the test needs it not to be", i)
		}
	}
	if _, err := tc.nodes[li].AddPeer(context.Background(), spec); err != nil {
		t.Fatalf("AddPeer() error = %v", err)
	}
	testutil.WaitFor(t, "node-d promoted", 10*time.Second, func() bool { return tc.suffrage(li, "node-d") == SuffrageVoter })
	testutil.WaitFor(t, "node-d caught up", 10*time.Second, func() bool {
		return tc.nodes[di].FSM().AppliedIndex() >= tc.nodes[li].FSM().AppliedIndex()
	})
	future := tc.nodes[li].raft.LeadershipTransferToServer(raft.ServerID("node-d"), raft.ServerAddress(spec.Raft))
	if err := future.Error(); err != nil {
		t.Fatalf("leadership transfer to node-d: %v", err)
	}
	testutil.WaitFor(t, "node-d leads with its claim applied", 10*time.Second, func() bool {
		_, err := tc.nodes[di].readyLeadership()
		return err == nil
	})
	for _, n := range tc.nodes {
		testutil.WaitFor(t, n.ID()+" resolves node-d as leader", 5*time.Second, func() bool {
			c, ok := n.Leader()
			return ok && c.Machine == "node-d" && c.URL == spec.URL
		})
	}
}
