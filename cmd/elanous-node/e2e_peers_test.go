package main

// End-to-end tests of the two membership procedures of docs/operations.md, on real
// `elanous-node serve` processes: replacing a dead candidate machine while a
// member works, and recovering from a lost quorum with `recover`.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// TestE2E_ReplaceDeadMachine is docs/operations.md's "Replace a dead candidate
// machine": node-3's data is lost; `peers remove node-3`; node-4 starts with
// cluster.bootstrap false; `peers add node-4` — it catches up through a
// snapshot (the cluster compacts its log every few entries) and is promoted.
// Meanwhile a member holds a lease with `lease acquire --hold` and a
// `member run` heartbeats, joined through node-3 itself: nothing is lost
// (same lease id and fence, the member's records never registered again),
// and the member's join file ends up listing node-4 instead of node-3.
func TestE2E_ReplaceDeadMachine(t *testing.T) {
	e2eBinary(t)
	c := newE2ECluster(t, 3)
	for _, nd := range c.nodes {
		c.writeConfig(nd, raftTuning)
	}
	leader, _ := c.startAll()
	var dead *e2eNode
	for _, nd := range c.nodes {
		if nd != leader {
			dead = nd // a follower; the member joins through it
		}
	}
	all := slices.Clone(c.nodes)
	testutil.Poll(t, "the directory seeded", 10*time.Second, func() error {
		peers, err := c.peersOf(leader)
		if err != nil {
			return err
		}
		if len(peers) != 3 || peers[0].AddedAt == 0 {
			return fmt.Errorf("peers %+v", peers)
		}
		return nil
	})

	// The member: joined through node-3 with a machine token, heartbeating.
	machineToken := c.issueMachineToken(leader, "m1")
	memberDir := t.TempDir()
	tokenFile := writeSecret(t, machineToken, 0o600)
	if _, stderr, err := e2eCommand(t, 20*time.Second, childEnv(), "join", "--url", dead.url, "--token-file", tokenFile,
		"--machine", "m1", "--data-dir", memberDir); err != nil {
		t.Fatalf("join: %v\n%s", err, stderr)
	}
	memberProc := startProc(t, t.TempDir(), "member", childEnv(), "member", "run", "--data-dir", memberDir,
		"--candidates", candidateFlag(all...), "--machine", "m1", "--endpoint", "http://127.0.0.1:9", "--interval", "500ms")
	// The lease holder: the machine token from the environment.
	holder := startProc(t, t.TempDir(), "holder", childEnv("ELANOUS_TOKEN="+machineToken), "lease", "acquire",
		"--data-dir", t.TempDir(), "--candidates", candidateFlag(all...), "--machine", "m1", "--purpose", "replace",
		"--ttl", "8s", "--hold", "--renew-interval", "500ms", "--json")
	var lease wire.PortLease
	testutil.Poll(t, "the holder's lease", 20*time.Second, func() error {
		out, _ := holder.output()
		line, _, ok := strings.Cut(out, "\n")
		if !ok {
			return fmt.Errorf("no lease printed yet")
		}
		return json.Unmarshal([]byte(line), &lease)
	})
	joinLists := func(want ...string) func() error {
		return func() error {
			j, err := member.ReadJoinFile(memberDir)
			if err != nil || j == nil {
				return fmt.Errorf("join file: %v", err)
			}
			var got []string
			for _, c := range j.Candidates {
				got = append(got, c.Machine)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("the join file lists %v, want %v", got, want)
			}
			return nil
		}
	}
	testutil.Poll(t, "the member keeps the cluster's list", 20*time.Second, joinLists("node-1", "node-2", "node-3"))
	var records []wire.Resource
	testutil.Poll(t, "the member's records", 20*time.Second, func() error {
		records = records[:0]
		for _, id := range []string{"machine:m1", "instance:m1/member"} {
			r, err := c.resourceOf(leader, id)
			if err != nil {
				return err
			}
			records = append(records, r)
		}
		return nil
	})

	// 1. node-3's machine dies with its data.
	dead.proc.kill(t)
	if err := os.RemoveAll(dead.dataDir); err != nil {
		t.Fatal(err)
	}
	survivors := c.running()
	want := []string{survivors[0].id, survivors[1].id, "node-4"}
	admin := childEnv("ELANOUS_TOKEN=" + c.tokens.Admin)
	// 2. peers remove node-3.
	if out, stderr, err := e2eCommand(t, 20*time.Second, admin, "peers", "remove", dead.id, "--candidates", candidateFlag(survivors...)); err != nil {
		t.Fatalf("peers remove: %v\n%s%s", err, out, stderr)
	}
	// The log grows past a few snapshots, so node-4 cannot be sent the log
	// from its start: it must install a snapshot.
	for i := range 60 {
		testutil.Expect(t, e2eCall(http.MethodPost, survivors[i%2].url+"/v1/resources/register", c.tokens.Member,
			registerBody(fmt.Sprintf("instance:filler/%d", i), "filler")), http.StatusOK)
	}
	testutil.Poll(t, "the leader compacted its log", 20*time.Second, func() error {
		_, claim := c.waitPrimary(nil, 0, 10*time.Second)
		idx, err := c.raftStat(c.node(claim.Holder), "last_snapshot_index")
		if err != nil {
			return err
		}
		if idx < 64 {
			return fmt.Errorf("last snapshot at index %d", idx)
		}
		return nil
	})

	// 3. node-4 starts with bootstrap false and waits.
	newNode := c.addWaitingNode("node-4", raftTuning)
	// 4. peers add node-4: it catches up and is promoted.
	started := time.Now()
	out, stderr, err := e2eCommand(t, 90*time.Second, admin, "peers", "add", "--machine", newNode.id, "--url", newNode.url,
		"--raft", newNode.raft, "--wait", "60s", "--candidates", candidateFlag(survivors...))
	if err != nil {
		t.Fatalf("peers add: %v\n%s%s", err, out, stderr)
	}
	promoted := time.Since(started)
	t.Logf("peers add: %s", strings.TrimSpace(stderr))
	t.Logf("node-4 added, caught up and promoted %s after peers add started", promoted.Round(time.Millisecond))
	if promoted > 45*time.Second {
		t.Errorf("node-4 took %s to be promoted, want well under a minute", promoted)
	}
	_, nodeLog := newNode.proc.output()
	if !strings.Contains(nodeLog, "Installed remote snapshot") {
		t.Errorf("node-4 did not catch up through a snapshot (no \"Installed remote snapshot\" in its log)")
	}
	testutil.Poll(t, "node-4 serves", 10*time.Second, func() error {
		_, err := testutil.DoExpect(e2eCall(http.MethodGet, newNode.url+"/v1/ready", "", nil), http.StatusOK)
		return err
	})
	peers, err := c.peersOf(newNode)
	if err != nil {
		t.Fatal(err)
	}
	if got := voterNames(peers); !slices.Equal(got, want) {
		t.Errorf("voters = %v, want %v", got, want)
	}
	for _, p := range peers {
		if p.Machine == dead.id {
			t.Errorf("peers still lists %s: %+v", dead.id, p)
		}
	}
	// peers list, as an operator reads it.
	table, stderr, err := e2eCommand(t, 20*time.Second, childEnv("ELANOUS_TOKEN="+c.tokens.Query), "peers", "list", "--candidates", candidateFlag(newNode))
	if err != nil {
		t.Fatalf("peers list: %v\n%s", err, stderr)
	}
	t.Logf("peers list:\n%s", table)
	if !strings.Contains(table, "node-4") || strings.Contains(table, dead.id) || strings.Count(table, "leader") != 1 {
		t.Errorf("peers list shows %s", table)
	}

	// The member learned the new list and kept it.
	testutil.Poll(t, "the member's join file lists node-4", 20*time.Second, joinLists(want...))

	// Nothing was lost: the same lease, never expired or granted again; the
	// member's records were never registered again.
	if holder.exited() {
		_, holderErr := holder.output()
		t.Fatalf("the lease holder exited (lease lost?):\n%s", holderErr)
	}
	got, err := c.leaseOf(newNode, lease.Port)
	if err != nil || got.LeaseID != lease.LeaseID || got.Fence != lease.Fence || got.GrantedAt != lease.GrantedAt {
		t.Errorf("lease on port %d through node-4 = %+v, %v; want id %s fence %d granted at %d", lease.Port, got, err, lease.LeaseID, lease.Fence, lease.GrantedAt)
	}
	for _, want := range records {
		r, err := c.resourceOf(newNode, want.ID)
		if err != nil || r.RegisteredAt != want.RegisteredAt {
			t.Errorf("%s through node-4 = %+v, %v; want registered at %d (never again)", want.ID, r, err, want.RegisteredAt)
		}
		// The machine heartbeats every 500 ms (the instance only every 300 s).
		if want.Kind == "machine" && r.ExpiresAt <= want.ExpiresAt {
			t.Errorf("%s expires at %d, not after %d: not renewed through the replacement", want.ID, r.ExpiresAt, want.ExpiresAt)
		}
	}
	if memberProc.exited() {
		t.Fatalf("member run exited")
	}
	holder.stop(t, 10*time.Second)
	memberProc.stop(t, 10*time.Second)
	_, memberLog := memberProc.output()
	if strings.Contains(memberLog, machineToken) {
		t.Errorf("the member logged its token")
	}
	c.checkLogs(append([]*proc{memberProc, holder}, procsOf(c.running())...)...)
}

// TestE2E_RecoverLostQuorum is docs/operations.md's "Recover from a lost quorum":
// two of three nodes are killed for good; the survivor, stopped, is
// recovered alone with `recover --peers`; it serves its data (the state hash
// recover reports is the one the cluster had, and the records are there);
// then two fresh nodes are added with `peers add`, catch up and vote — they
// elect a leader between them once the survivor is killed too.
func TestE2E_RecoverLostQuorum(t *testing.T) {
	c, leader, _ := startE2ECluster(t)
	var leases []wire.PortLease
	acked := newAckedWrites()
	for i := range 5 {
		c.register(acked, leader, fmt.Sprintf("machine:keep-%d", i))
	}
	for range 3 {
		leases = append(leases, c.acquire(acked, leader, "keep"))
	}
	c.issueMachineToken(leader, "m1")

	// Every node's (applied index, state hash) as they move, until the three
	// agree on a state that follows a change. The leader keeps proposing on
	// its own (sweeps, format steps, directory entries), so an entry may
	// still reach the survivor's log between this picture and the kill; the
	// survivor's log itself, read once the node is stopped, is the complete
	// picture recover is checked against.
	seen := map[uint64]string{}
	var agreed, first struct {
		index uint64
		hash  string
	}
	testutil.Poll(t, "a fresh agreement on the state", 20*time.Second, func() error {
		var cur []struct {
			index uint64
			hash  string
		}
		for _, nd := range c.nodes {
			st, err := c.getStatus(nd)
			if err != nil {
				return err
			}
			seen[st.AppliedIndex] = st.StateHash
			cur = append(cur, struct {
				index uint64
				hash  string
			}{st.AppliedIndex, st.StateHash})
		}
		if cur[0] != cur[1] || cur[1] != cur[2] {
			return fmt.Errorf("nodes differ: %v", cur)
		}
		if first.index == 0 {
			first = cur[0]
		}
		if cur[0] == first {
			return fmt.Errorf("no change since %d yet", first.index)
		}
		agreed = cur[0]
		return nil
	})
	var survivor *e2eNode
	for _, nd := range c.nodes {
		if nd != leader && survivor == nil {
			survivor = nd
			continue
		}
		nd.proc.kill(t)
	}
	t.Logf("killed the two others after the agreement at applied index %d; %s survives", agreed.index, survivor.id)

	// recover refuses a running node.
	if _, _, err := e2eCommand(t, 20*time.Second, childEnv(), "recover", "--config", survivor.config, "--peers", survivor.id); err == nil ||
		!strings.Contains(err.Error(), "is the node running") {
		t.Fatalf("recover on a running node: %v, want a refusal naming the lock", err)
	}
	survivor.proc.stop(t, 10*time.Second)

	// The survivor's log, replayed entry by entry: it holds the state every
	// node reported at each index it passes (the agreed one among them), and
	// recover must end where the replay ends: every entry of the log is
	// applied, committed or not (ARCHITECTURE.md §9).
	logged, snapIndex, lastCommand := replayHashes(t, survivor.dataDir)
	if agreed.index <= snapIndex {
		t.Fatalf("the survivor's snapshot (index %d) covers the agreed index %d: the replay cannot check it", snapIndex, agreed.index)
	}
	if got := logged[agreed.index]; got != agreed.hash {
		t.Errorf("the survivor's log at the agreed index %d gives state %q, want %s", agreed.index, got, agreed.hash)
	}
	for index, hash := range seen {
		if got, ok := logged[index]; ok && got != hash {
			t.Errorf("the survivor's log at index %d gives state %s, a node reported %s", index, got, hash)
		}
	}
	started := time.Now()
	out, stderr, err := e2eCommand(t, 30*time.Second, childEnv(), "recover", "--config", survivor.config, "--peers", survivor.id)
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, stderr)
	}
	t.Logf("recover:\n%s", out)
	m := regexp.MustCompile(`state applied to (\d+), hash ([0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("recover output has no applied index and hash:\n%s", out)
	}
	index, _ := strconv.ParseUint(m[1], 10, 64)
	if index != lastCommand || m[2] != logged[lastCommand] {
		t.Errorf("recovered state %d/%s, want the survivor's log replayed to its last command %d/%s (agreed %d/%s)",
			index, m[2], lastCommand, logged[lastCommand], agreed.index, agreed.hash)
	}

	// The survivor alone serves its data.
	c.start(survivor)
	_, claim := c.waitPrimary(nil, 0, 20*time.Second)
	recovered := time.Since(started)
	t.Logf("recover + restart: %s until %s served as primary (generation %d)", recovered.Round(time.Millisecond), claim.Holder, claim.Generation)
	if claim.Holder != survivor.id {
		t.Fatalf("primary = %+v, want %s", claim, survivor.id)
	}
	for _, l := range leases {
		got, err := c.leaseOf(survivor, l.Port)
		if err != nil || got.LeaseID != l.LeaseID || got.Fence != l.Fence {
			t.Errorf("lease on port %d = %+v, %v; want id %s fence %d", l.Port, got, err, l.LeaseID, l.Fence)
		}
	}
	for i := range 5 {
		if _, err := c.resourceOf(survivor, fmt.Sprintf("machine:keep-%d", i)); err != nil {
			t.Errorf("machine:keep-%d after recovery: %v", i, err)
		}
	}
	testutil.Poll(t, "the lost servers leave the directory", 10*time.Second, func() error {
		peers, err := c.peersOf(survivor)
		if err != nil {
			return err
		}
		if len(peers) != 1 || peers[0].Machine != survivor.id || peers[0].Suffrage != wire.SuffrageVoter {
			return fmt.Errorf("peers %+v", peers)
		}
		return nil
	})

	// Two fresh nodes join, catch up and become voters.
	admin := childEnv("ELANOUS_TOKEN=" + c.tokens.Admin)
	var fresh []*e2eNode
	for _, id := range []string{"node-4", "node-5"} {
		nd := c.addWaitingNode(id, nil)
		start := time.Now()
		if out, stderr, err := e2eCommand(t, 90*time.Second, admin, "peers", "add", "--machine", nd.id, "--url", nd.url,
			"--raft", nd.raft, "--wait", "60s", "--candidates", candidateFlag(survivor)); err != nil {
			t.Fatalf("peers add %s: %v\n%s%s", id, err, out, stderr)
		}
		t.Logf("%s added and promoted in %s", id, time.Since(start).Round(time.Millisecond))
		fresh = append(fresh, nd)
	}
	peers, err := c.peersOf(survivor)
	if err != nil {
		t.Fatal(err)
	}
	wantVoters := []string{survivor.id, "node-4", "node-5"}
	slices.Sort(wantVoters)
	if got := voterNames(peers); !slices.Equal(got, wantVoters) {
		t.Fatalf("voters = %v, want %v", got, wantVoters)
	}
	// They vote: without the survivor, node-4 and node-5 elect a leader,
	// which has the data. The survivor may have claimed again while the
	// fresh nodes joined (a term of its own each time), and a claim it made
	// may be applied after its death: the primary sought is the first held
	// by a fresh node, above every generation seen before it.
	survivor.proc.signal(t, syscall.SIGKILL)
	if _, err := survivor.proc.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	holderNode, claim2 := c.waitPrimary(nil, claim.Generation, 20*time.Second)
	for holderNode == survivor {
		t.Logf("%s's claim of generation %d is the applied one; waiting for the next", survivor.id, claim2.Generation)
		holderNode, claim2 = c.waitPrimary(nil, claim2.Generation, 20*time.Second)
	}
	if holderNode != fresh[0] && holderNode != fresh[1] {
		t.Fatalf("new primary %+v, want node-4 or node-5", claim2)
	}
	if got, err := c.leaseOf(holderNode, leases[0].Port); err != nil || got.LeaseID != leases[0].LeaseID {
		t.Errorf("lease through the new leader %s = %+v, %v; want %s", holderNode.id, got, err, leases[0].LeaseID)
	}
	c.checkLogs(procsOf(c.running())...)
}

// procsOf returns the processes of nodes.
func procsOf(nodes []*e2eNode) []*proc {
	var out []*proc
	for _, nd := range nodes {
		out = append(out, nd.proc)
	}
	return out
}

// replayHashes replays the Raft store of the stopped node whose data
// directory is dir as recover does (replayDataDir): its latest snapshot, if
// any, then every command of the log. It returns the state hash after each
// command by index, the snapshot's index (0 without one) and the index of
// the last command.
func replayHashes(t *testing.T, dir string) (hashes map[uint64]string, snapIndex, lastCommand uint64) {
	t.Helper()
	hashes = map[uint64]string{}
	f, snapIndex, _, _ := replayDataDir(t, dir, func(_ uint64, f *fsm.FSM) {
		var hash string
		lastCommand, hash = f.AppliedHash()
		hashes[lastCommand] = hash
	})
	if lastCommand == 0 {
		lastCommand, hashes[snapIndex] = f.AppliedHash()
	}
	return hashes, snapIndex, lastCommand
}
