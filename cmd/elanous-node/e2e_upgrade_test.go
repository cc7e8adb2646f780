package main

// Rolling upgrades: the previous release's data directory is served by this
// build, and a cluster of the previous release upgraded one node at a time
// keeps serving through a leader kill, moving to format 2 only once every
// node runs this build.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// The release fixture, testdata/release-8e4068a: the data directory of
// node-1, a one-candidate cluster of the previous release, holding
// resources, leases (one granted under an Idempotency-Key, one released), a
// machine token and a deleted resource, with a Raft snapshot (the log before
// it compacted away) and log entries after it; and expected.json, what that
// build reported about it. It was written by that build, once:
//
//	go test ./cmd/elanous-node -run TestReleaseFixture -write-release-fixture
//
// which builds the release from git, runs it and copies its data directory.
// It is never rewritten once committed.
var writeReleaseFixture = flag.Bool("write-release-fixture", false,
	"write testdata/release-"+previousRelease+" by running the previous release (never overwrites)")

// releaseFixtureDir is the fixture's directory.
var releaseFixtureDir = filepath.Join("testdata", "release-"+previousRelease)

// releaseExpect is expected.json: what the previous release reported.
type releaseExpect struct {
	Release      string `json:"release"`
	Machine      string `json:"machine"` // the candidate's name
	AppliedIndex uint64 `json:"appliedIndex"`
	StateHash    string `json:"stateHash"`
	Generation   uint64 `json:"generation"`
	// SnapshotIndex is the index of the latest Raft snapshot in the data
	// directory; entries after it are in the log.
	SnapshotIndex uint64             `json:"snapshotIndex"`
	Resources     []wire.Resource    `json:"resources"`
	Leases        []wire.PortLease   `json:"leases"`
	Tokens        []wire.TokenInfo   `json:"tokens"`
	TokenMachine  string             `json:"tokenMachine"`
	MachineToken  string             `json:"machineToken"` // a test token; the fixture's only use of it
	ClusterTokens wire.TokensFile    `json:"clusterTokens"`
	Status        wire.ClusterStatus `json:"status"`
}

func readReleaseExpect(t *testing.T) releaseExpect {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(releaseFixtureDir, "expected.json"))
	if err != nil {
		t.Fatalf("read the release fixture: %v", err)
	}
	var exp releaseExpect
	if err := json.Unmarshal(data, &exp); err != nil {
		t.Fatalf("release fixture expected.json: %v", err)
	}
	return exp
}

// copyDataDir copies the fixture's data directory to dst with the modes a
// candidate wants (0700 directories, 0600 files: git keeps neither).
func copyDataDir(t *testing.T, dst string) {
	t.Helper()
	if err := copyTree(filepath.Join(releaseFixtureDir, "data"), dst, 0o700, 0o600); err != nil {
		t.Fatalf("copy the release fixture: %v", err)
	}
}

// copyTree copies the directory tree src into dst, making its directories
// with dirMode and its files with fileMode.
func copyTree(src, dst string, dirMode, fileMode fs.FileMode) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, dirMode)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, fileMode)
	})
}

// TestReleaseFixture replays the previous release's data directory with this
// build's state machine, offline: the latest snapshot restored, the log
// after it applied. It must reach the state hash and applied index that
// release reported, with the same records.
func TestReleaseFixture(t *testing.T) {
	if *writeReleaseFixture {
		writeReleaseFixtureDir(t)
	}
	exp := readReleaseExpect(t)
	dir := t.TempDir()
	copyDataDir(t, dir)
	f, snapIndex, firstIndex, lastIndex := replayDataDir(t, dir, nil)
	if snapIndex != exp.SnapshotIndex || snapIndex == 0 || firstIndex <= 1 || lastIndex <= snapIndex {
		t.Fatalf("fixture: snapshot at %d (expected.json says %d), log %d to %d; want a snapshot, the log before it compacted and entries after it",
			snapIndex, exp.SnapshotIndex, firstIndex, lastIndex)
	}
	applied, hash := f.AppliedHash()
	if applied != exp.AppliedIndex || hash != exp.StateHash {
		t.Fatalf("replayed release data: applied %d hash %s, want the release's %d %s", applied, hash, exp.AppliedIndex, exp.StateHash)
	}
	if f.Format() != 1 {
		t.Errorf("replayed release data at format %d, want 1", f.Format())
	}
	var ids []string
	for _, r := range f.Resources("", "") {
		ids = append(ids, r.ID)
	}
	var wantIDs []string
	for _, r := range exp.Resources {
		wantIDs = append(wantIDs, r.ID)
	}
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("replayed resources %v, want %v", ids, wantIDs)
	}
}

// previousReleaseConfig removes from a test node's configuration the keys
// the previous release does not know (it refuses unknown keys).
func previousReleaseConfig(doc map[string]any) {
	delete(doc, "limits")
}

// replayDataDir restores the latest snapshot of the data directory dir, if
// there is one, into a new state machine and applies every command of the
// log after it, calling applied (when not nil) after each with the entry's
// index. It returns the state machine, the snapshot's index (0 without one)
// and the log's first and last index.
func replayDataDir(t *testing.T, dir string, applied func(index uint64, f *fsm.FSM)) (*fsm.FSM, uint64, uint64, uint64) {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft", "raft.db")})
	if err != nil {
		t.Fatalf("open raft.db: %v", err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil {
		t.Fatalf("list snapshots: %v", err)
	}
	f := fsm.New()
	var snapIndex uint64
	if len(list) > 0 {
		meta, rc, err := snaps.Open(list[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Restore(rc); err != nil {
			t.Fatalf("restore snapshot %s: %v", meta.ID, err)
		}
		snapIndex = meta.Index
	}
	first, err := store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first > snapIndex+1 {
		t.Fatalf("the log starts at %d, after the snapshot's %d", first, snapIndex)
	}
	for i := snapIndex + 1; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatalf("log entry %d: %v", i, err)
		}
		if l.Type == raft.LogCommand {
			f.Apply(&l)
			if applied != nil {
				applied(i, f)
			}
		}
	}
	return f, snapIndex, first, last
}

// writeReleaseFixtureDir runs the previous release as a one-candidate
// cluster with snapshots every few entries, writes to it, and copies its
// data directory and what it reports into the fixture directory.
func writeReleaseFixtureDir(t *testing.T) {
	if _, err := os.Stat(releaseFixtureDir); err == nil {
		t.Fatalf("%s exists: a release fixture is written once and never rewritten", releaseFixtureDir)
	}
	bin := previousReleaseBinary(t)
	c := newE2ECluster(t, 1)
	nd := c.nodes[0]
	c.writeConfig(nd, func(doc map[string]any) {
		previousReleaseConfig(doc)
		r := doc["raft"].(map[string]any)
		r["snapshot_threshold"], r["snapshot_interval"], r["trailing_logs"] = 8, "200ms", 2
	})
	c.startWith(nd, bin)
	c.waitPrimary(nil, 0, 20*time.Second)
	call := func(method, path, token string, body any, want int) testutil.Reply {
		return testutil.Expect(t, e2eCall(method, nd.url+path, token, body), want)
	}
	tok := c.tokens.Member
	call(http.MethodPost, "/v1/resources/register", tok, registerBody("machine:mbp", "mbp"), 200)
	inst := registerBody("instance:mbp/1", "mbp")
	inst["endpoint"] = "http://10.0.0.9:31451"
	inst["attrs"] = map[string]any{"load": 0.7, "note": "<a&b> ü"}
	call(http.MethodPost, "/v1/resources/register", tok, inst, 200)
	call(http.MethodPost, "/v1/resources/register", tok, registerBody("machine:gone", "gone"), 200)
	call(http.MethodDelete, "/v1/resources/"+member.EscapeID("machine:gone"), tok, nil, 204)
	idem := e2eCall(http.MethodPost, nd.url+"/v1/leases/port", tok, acquireBody("mbp", "integration test")).WithHeader(wire.HeaderIdempotencyKey, "fixture-key")
	kept := testutil.Decode[wire.PortLease](t, testutil.Expect(t, idem, 201))
	released := testutil.Decode[wire.PortLease](t, call(http.MethodPost, "/v1/leases/port", tok, acquireBody("mbp", "released"), 201))
	testutil.Expect(t, e2eCall(http.MethodDelete, fmt.Sprintf("%s/v1/leases/port/%d", nd.url, released.Port), tok, nil).WithHeader(wire.HeaderPortLeaseID, released.LeaseID), 204)
	token := c.issueMachineToken(nd, "fixture-m")
	call(http.MethodPost, "/v1/resources/register", token, registerBody("machine:fixture-m", "fixture-m"), 200)
	testutil.Expect(t, e2eCall(http.MethodPost, fmt.Sprintf("%s/v1/leases/port/%d/heartbeat", nd.url, kept.Port), tok, nil).WithHeader(wire.HeaderPortLeaseID, kept.LeaseID), 200)
	snapshots := filepath.Join(nd.dataDir, "raft", "snapshots")
	testutil.Poll(t, "a snapshot by the previous release", 20*time.Second, func() error {
		entries, _ := os.ReadDir(snapshots)
		if len(entries) == 0 {
			return fmt.Errorf("no snapshot in %s", snapshots)
		}
		return nil
	})
	// Entries after the snapshot.
	call(http.MethodPost, "/v1/resources/"+member.EscapeID("machine:mbp")+"/heartbeat", tok, map[string]any{"attrs": map[string]any{"seats": 3}}, 200)
	call(http.MethodPost, "/v1/resources/register", tok, registerBody("machine:late", "late"), 200)

	exp := releaseExpect{Release: previousRelease, Machine: nd.id, TokenMachine: "fixture-m", MachineToken: token, ClusterTokens: c.tokens}
	st, err := c.getStatus(nd)
	if err != nil {
		t.Fatal(err)
	}
	exp.Status, exp.AppliedIndex, exp.StateHash, exp.Generation = st, st.AppliedIndex, st.StateHash, st.Generation
	exp.Resources = testutil.Decode[[]wire.Resource](t, call(http.MethodGet, "/v1/resources", c.tokens.Query, nil, 200))
	exp.Leases = testutil.Decode[[]wire.PortLease](t, call(http.MethodGet, "/v1/leases/port", c.tokens.Query, nil, 200))
	exp.Tokens = testutil.Decode[[]wire.TokenInfo](t, call(http.MethodGet, "/v1/tokens/member", c.tokens.Admin, nil, 200))
	nd.proc.stop(t, 10*time.Second)

	if err := os.MkdirAll(filepath.Join(releaseFixtureDir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(nd.dataDir, filepath.Join(releaseFixtureDir, "data"), 0o755, 0o644); err != nil {
		t.Fatal(err)
	}
	_, exp.SnapshotIndex, _, _ = replayDataDir(t, nd.dataDir, nil)
	data, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(releaseFixtureDir, "expected.json"), append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: applied %d, snapshot at %d, hash %s", releaseFixtureDir, exp.AppliedIndex, exp.SnapshotIndex, exp.StateHash)
}

// TestE2E_ReleaseDataDirServed starts this build on a copy of the previous
// release's data directory: it serves the release's records (TTLs rebased
// by its claim), its cluster and machine tokens work, it takes writes,
// raises the format to 2 (the only server runs this build), and serves it
// all again after a restart.
func TestE2E_ReleaseDataDirServed(t *testing.T) {
	exp := readReleaseExpect(t)
	c := newE2ECluster(t, 1)
	nd := c.nodes[0]
	if nd.id != exp.Machine {
		t.Fatalf("the test cluster's node is %s, the fixture's %s", nd.id, exp.Machine)
	}
	if err := os.RemoveAll(nd.dataDir); err != nil {
		t.Fatal(err)
	}
	copyDataDir(t, nd.dataDir)
	c.tokens = exp.ClusterTokens
	c.start(nd)
	_, p := c.waitPrimary(nil, exp.Generation, 20*time.Second)

	// check compares what the node serves with want, the expiry times
	// apart (each claim rebases them): resources, leases, tokens.
	check := func(when string, want []wire.Resource) {
		t.Helper()
		got := testutil.Decode[[]wire.Resource](t, testutil.Expect(t, e2eCall(http.MethodGet, nd.url+"/v1/resources?consistent=true", c.tokens.Query, nil), 200))
		if len(got) != len(want) {
			t.Fatalf("%s: %d resources, want %d", when, len(got), len(want))
		}
		for i, r := range got {
			w := want[i]
			if r.ExpiresAt <= w.ExpiresAt {
				t.Errorf("%s: %s expires at %d, want later than %d (rebased onto the new claim)", when, r.ID, r.ExpiresAt, w.ExpiresAt)
			}
			r.ExpiresAt, w.ExpiresAt = 0, 0
			if !reflect.DeepEqual(r, w) {
				t.Errorf("%s: resource %+v, want %+v", when, r, w)
			}
		}
		leases := testutil.Decode[[]wire.PortLease](t, testutil.Expect(t, e2eCall(http.MethodGet, nd.url+"/v1/leases/port?consistent=true", c.tokens.Query, nil), 200))
		if len(leases) != len(exp.Leases) {
			t.Fatalf("%s: leases %+v, want the release's %+v", when, leases, exp.Leases)
		}
		for i, l := range leases {
			w := exp.Leases[i]
			l.ExpiresAt, w.ExpiresAt = 0, 0
			if l != w {
				t.Errorf("%s: lease %+v, want the release's %+v", when, l, w)
			}
		}
		tokens := testutil.Decode[[]wire.TokenInfo](t, testutil.Expect(t, e2eCall(http.MethodGet, nd.url+"/v1/tokens/member", c.tokens.Admin, nil), 200))
		if !reflect.DeepEqual(tokens, exp.Tokens) {
			t.Errorf("%s: tokens %+v, want the release's %+v", when, tokens, exp.Tokens)
		}
	}
	check("served by this build", exp.Resources)
	if p.Generation <= exp.Generation {
		t.Errorf("generation %d after the upgrade, want above the release's %d", p.Generation, exp.Generation)
	}
	// The release's machine token and cluster tokens write.
	testutil.Expect(t, e2eCall(http.MethodPost, nd.url+"/v1/resources/"+member.EscapeID("machine:"+exp.TokenMachine)+"/heartbeat", exp.MachineToken, nil), 200)
	testutil.Expect(t, e2eCall(http.MethodPost, nd.url+"/v1/resources/register", c.tokens.Member, registerBody("machine:after-upgrade", "after-upgrade")), 200)
	testutil.Poll(t, fmt.Sprintf("format %d on the upgraded one-node cluster", fsm.MaxFormat), 20*time.Second, func() error {
		st, err := c.getStatus(nd)
		if err == nil && st.Format != fsm.MaxFormat {
			err = fmt.Errorf("format %d", st.Format)
		}
		return err
	})
	before := testutil.Decode[[]wire.Resource](t, testutil.Expect(t, e2eCall(http.MethodGet, nd.url+"/v1/resources?consistent=true", c.tokens.Query, nil), 200))
	nd.proc.stop(t, 10*time.Second)
	c.start(nd)
	c.waitPrimary(nil, p.Generation, 20*time.Second)
	check("after a restart at the newest format", before)
	c.checkLogs(nd.proc)
}

// TestE2E_MixedVersionUpgrade upgrades a three-node cluster of the previous
// release, built from git, to this build one node at a time while clients
// write, and kills the leader in the middle. The cluster keeps serving at
// every step, no acknowledged write is lost, and the format level stays 1
// while any node runs the previous release, then rises to 2.
func TestE2E_MixedVersionUpgrade(t *testing.T) {
	oldBin := previousReleaseBinary(t)
	start := time.Now()
	c := newE2ECluster(t, 3)
	for _, nd := range c.nodes {
		c.writeConfig(nd, previousReleaseConfig)
		c.startWith(nd, oldBin)
	}
	leader, _ := c.waitPrimary(nil, 0, 20*time.Second)
	a := newAckedWrites()
	held := c.acquire(a, leader, "held through the upgrade")
	var writers []*loadWriter
	for i := range 2 {
		writers = append(writers, c.startLoad(a, fmt.Sprintf("u%d", i)))
	}
	a.waitMore(t, "by the previous release", 20, 20*time.Second)

	old := map[*e2eNode]bool{}
	for _, nd := range c.nodes {
		old[nd] = true
	}
	// formatOne checks that every node of this build still reports format 1.
	formatOne := func(when string) {
		t.Helper()
		for _, nd := range c.running() {
			if old[nd] {
				continue
			}
			st, err := c.getStatus(nd)
			if err != nil {
				t.Fatalf("status of %s %s: %v", nd.id, when, err)
			}
			if st.Format != 1 {
				t.Fatalf("%s reports format %d %s, while a node runs the previous release; want 1", nd.id, st.Format, when)
			}
		}
	}
	upgrade := func(nd *e2eNode) {
		t.Helper()
		if nd.proc != nil && !nd.proc.exited() {
			nd.proc.stop(t, 10*time.Second)
		}
		c.writeConfig(nd, nil) // this build's keys as well
		c.start(nd)            // this build
		delete(old, nd)
		c.waitReady(nd, 20*time.Second)
		// docs/operations.md's procedure: the next node only once the cluster is
		// healthy, old and new builds side by side.
		testutil.Poll(t, "status --check healthy after upgrading "+nd.id, 20*time.Second, func() error {
			if r := c.client(c.tokens.Query, "status", "--check"); r.code != 0 {
				return fmt.Errorf("%s", r.stdout)
			}
			return nil
		})
		a.waitMore(t, "after upgrading "+nd.id, 20, 20*time.Second)
		if len(old) > 0 {
			formatOne("after upgrading " + nd.id)
		}
		t.Logf("%s runs this build (%s into the test)", nd.id, time.Since(start).Round(time.Millisecond))
	}

	// One follower first, then the leader is killed mid-upgrade and comes
	// back as this build, then the rest.
	var first *e2eNode
	for _, nd := range c.nodes {
		if nd != leader {
			first = nd
			break
		}
	}
	upgrade(first)
	leader, p := c.waitPrimary(nil, 0, 10*time.Second)
	leader.proc.kill(t)
	t.Logf("killed the leader %s (previous release: %v)", leader.id, old[leader])
	c.waitPrimary(leader, p.Generation, 20*time.Second)
	a.waitMore(t, "after killing the leader "+leader.id, 20, 20*time.Second)
	upgrade(leader)
	// The leader asks every server its format level every 5 s: two of
	// three run this build, and the level stays 1 through more than one
	// round of asking.
	testutil.Hold(t, "format level 1 with one node of the previous release left", 6*time.Second, 250*time.Millisecond, func() error {
		formatOne("with one node of the previous release left")
		return nil
	})
	for _, nd := range c.nodes {
		if old[nd] {
			upgrade(nd)
		}
	}
	testutil.Poll(t, fmt.Sprintf("format %d on every node once all run this build", fsm.MaxFormat), 30*time.Second, func() error {
		return c.atFormat(fsm.MaxFormat, c.nodes...)
	})
	a.waitMore(t, fmt.Sprintf("at format %d", fsm.MaxFormat), 20, 20*time.Second)
	for i, w := range writers {
		w.halt()
		w.rc.mu.Lock()
		t.Logf("writer %d: %d writes, %d retried once, %d failed after the retry (%v; the leader kill's election)", i, w.rc.ops, w.rc.retries, w.rc.failures, w.rc.kinds)
		w.rc.mu.Unlock()
	}
	leader, _ = c.waitPrimary(nil, 0, 10*time.Second)
	for _, nd := range c.nodes {
		c.checkAcked(a, nd, 15*time.Second)
	}
	if l := testutil.Decode[wire.PortLease](t, testutil.Expect(t, e2eCall(http.MethodGet, fmt.Sprintf("%s/v1/leases/port/%d", leader.url, held.Port), c.tokens.Query, nil), 200)); l.LeaseID != held.LeaseID || l.Fence != held.Fence {
		t.Errorf("the lease held through the upgrade = %+v, want lease id %s fence %d", l, held.LeaseID, held.Fence)
	}
	c.waitConverged(0, 15*time.Second)
	for _, nd := range c.nodes {
		c.checkLogs(nd.proc)
	}
	t.Logf("upgrade of 3 nodes with a leader kill: %s (the previous release's build not counted)", time.Since(start).Round(time.Millisecond))
}
