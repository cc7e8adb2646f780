package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// fileSnapshots returns a tweak for newTestCluster that gives every node a
// file snapshot store in a temporary directory, then applies more. Tests
// that restore use it: raft's in-memory snapshot store lets a snapshot being
// written be opened for replication (a data race in that test store, not in
// the file store nodes use).
func fileSnapshots(t *testing.T, more func(i int, c *Config)) func(int, *Config) {
	return func(i int, c *Config) {
		store, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c.Stores.Snapshots = store
		if more != nil {
			more(i, c)
		}
	}
}

// backupOf saves n's state as a backup document would hold it.
func backupOf(t *testing.T, n *Node) (Backup, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := n.Backup(ctx)
	if err != nil {
		t.Fatalf("Backup() error = %v", err)
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatalf("Backup().WriteTo() error = %v", err)
	}
	return b, buf.Bytes()
}

// waitConverged waits until every node reports the same state hash at the
// same applied index, at or above index.
func (tc *testCluster) waitConverged(index uint64) string {
	tc.t.Helper()
	var hash string
	testutil.WaitFor(tc.t, fmt.Sprintf("every node at one state hash from index %d", index), 10*time.Second, func() bool {
		var first uint64
		for i, n := range tc.nodes {
			applied, h := n.FSM().AppliedHash()
			if applied < index || (i > 0 && (applied != first || h != hash)) {
				return false
			}
			first, hash = applied, h
		}
		return true
	})
	return hash
}

// A backup restored on a running cluster replaces the state on every node:
// changes made after the backup are gone, the records are the backup's with
// their TTLs rebased onto the leader's clock, the claim is the current
// leader's at its term, leases keep id and fence, and later grants get
// fences above every restored one. The sweep loop and group commit work on.
func TestNode_RestoreReplacesTheStateOnEveryNode(t *testing.T) {
	tc := newTestCluster(t, 3, fileSnapshots(t, nil))
	li, leader := tc.leader()
	tc.waitFormat(li, fsm.MaxFormat)

	mustPropose(t, leader, register("kept", 600_000))
	lease := mustPropose(t, leader, acquire("o1", 600_000)).Value.(fsm.PortLease)
	mustPropose(t, leader, fsm.IssueToken{Machine: "kept", SHA256: fmt.Sprintf("%064x", 7)})
	saved, doc := backupOf(t, leader)
	if saved.Term != leader.raft.CurrentTerm() || saved.Applied() != leader.FSM().AppliedIndex() || saved.Counts().Resources != 1 {
		t.Fatalf("Backup() = term %d applied %d counts %+v", saved.Term, saved.Applied(), saved.Counts())
	}
	// Changes after the backup, which the restore must undo.
	mustPropose(t, leader, register("after", 600_000))
	mustPropose(t, leader, fsm.DeleteResource{Caller: fsm.Caller{Owner: "o1"}, ID: "machine:kept"})
	genBefore := leader.FSM().Primary().Generation

	b, err := fsm.ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("ReadBackup() error = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := leader.Restore(ctx, b)
	if err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if res.Index <= b.MaxIndex() || res.Primary.Holder != leader.ID() || res.Primary.Generation != leader.raft.CurrentTerm() || res.Primary.Generation < genBefore {
		t.Fatalf("Restore() = %+v, want an index above %d and %s's claim at term %d", res, b.MaxIndex(), leader.ID(), leader.raft.CurrentTerm())
	}
	tc.waitConverged(res.Index)
	for _, n := range tc.nodes {
		f := n.FSM()
		if _, ok := f.Resource("machine:after"); ok {
			t.Errorf("%s still holds machine:after, written after the backup", n.ID())
		}
		kept, ok := f.Resource("machine:kept")
		if !ok {
			t.Fatalf("%s lost machine:kept", n.ID())
		}
		if earliest := res.Primary.ClaimedAt + 600_000 - 1_000; kept.ExpiresAt < earliest {
			t.Errorf("%s machine:kept expires at %d, before the restore's now + its remaining TTL (≥ %d)", n.ID(), kept.ExpiresAt, earliest)
		}
		l, ok := f.Lease(lease.Port)
		if !ok || l.LeaseID != lease.LeaseID || l.Fence != lease.Fence || l.Generation != lease.Generation {
			t.Errorf("%s lease on port %d = %+v, want id %s fence %d generation %d", n.ID(), lease.Port, l, lease.LeaseID, lease.Fence, lease.Generation)
		}
		if len(f.Tokens()) != 1 || f.Primary() != res.Primary || f.Format() != fsm.MaxFormat {
			t.Errorf("%s tokens %v, primary %+v, format %d; want one token, %+v, %d", n.ID(), f.Tokens(), f.Primary(), f.Format(), res.Primary, fsm.MaxFormat)
		}
		if !n.Ready() {
			t.Errorf("%s not ready after the restore", n.ID())
		}
	}

	// Group commit goes on, and every new fence is above every restored one.
	var wg sync.WaitGroup
	fences := make(chan uint64, 8)
	for w := range 8 {
		wg.Go(func() {
			cmd := acquire(fmt.Sprintf("w%d", w), 600_000)
			cmd.Machine = fmt.Sprintf("m%d", w)
			r, err := leader.Propose(context.Background(), cmd)
			if err != nil {
				t.Errorf("Propose(acquire) after restore error = %v", err)
				return
			}
			fences <- r.Value.(fsm.PortLease).Fence
		})
	}
	wg.Wait()
	close(fences)
	for f := range fences {
		if f <= res.Index {
			t.Errorf("fence %d granted after the restore, want above %d", f, res.Index)
		}
	}
	// The sweep loop goes on: a short TTL expires through a Sweep.
	mustPropose(t, leader, register("short", 50))
	testutil.WaitFor(t, "machine:short to be swept after the restore", 10*time.Second, func() bool {
		_, ok := leader.FSM().Resource("machine:short")
		return !ok
	})
}

// A restore is refused, and changes nothing, on a follower, for a backup of
// a format above the cluster's level, and for an old backup's index.
func TestNode_RestoreRefusals(t *testing.T) {
	probe := func(context.Context, Candidate) (int, error) { return 1, nil } // the others run a format 1 build
	src := newTestCluster(t, 3, nil)
	si := src.readyLeader()
	src.waitFormat(si, fsm.MaxFormat)
	mustPropose(t, src.nodes[si], register("v2", 600_000))
	_, v2doc := backupOf(t, src.nodes[si])

	tc := newTestCluster(t, 3, fileSnapshots(t, func(_ int, c *Config) { c.FormatProbe = probe }))
	li, leader := tc.leader()
	mustPropose(t, leader, register("mine", 600_000))
	_, v1doc := backupOf(t, leader)
	hash := tc.waitConverged(leader.FSM().AppliedIndex())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	read := func(doc []byte) *fsm.Backup {
		b, err := fsm.ReadBackup(bytes.NewReader(doc))
		if err != nil {
			t.Fatalf("ReadBackup() error = %v", err)
		}
		return b
	}
	follower := tc.nodes[(li+1)%3]
	if _, err := follower.Restore(ctx, read(v1doc)); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Restore() on a follower error = %v, want %v", err, ErrNotLeader)
	}
	if _, err := leader.Restore(ctx, read(v2doc)); !errors.Is(err, fsm.ErrSnapshotTooNew) {
		t.Errorf("Restore(a newer format's backup) on a format 1 cluster error = %v, want %v", err, fsm.ErrSnapshotTooNew)
	}
	if got := tc.waitConverged(leader.FSM().AppliedIndex()); got != hash {
		t.Errorf("state hash after refused restores = %s, want %s (unchanged)", got, hash)
	}
}

// A backup from a cluster with a longer log restored into a young one puts
// the young cluster's log past every restored fence.
func TestNode_RestoreMovesTheLogPastTheBackup(t *testing.T) {
	old := newTestCluster(t, 3, nil)
	for i := range 40 {
		old.proposeOnLeader(register(fmt.Sprintf("m%d", i), 600_000))
	}
	last := old.proposeOnLeader(acquire("o1", 600_000)).Value.(fsm.PortLease)
	_, doc := backupOf(t, old.nodes[old.readyLeader()])

	young := newTestCluster(t, 3, fileSnapshots(t, nil))
	yi := young.readyLeader()
	leader := young.nodes[yi]
	young.waitFormat(yi, fsm.MaxFormat) // the backup's format
	if leader.raft.LastIndex() >= last.Fence {
		t.Fatalf("the young cluster's log is at %d, not below the backup's fence %d", leader.raft.LastIndex(), last.Fence)
	}
	b, err := fsm.ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := leader.Restore(ctx, b)
	if err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	young.waitConverged(res.Index)
	cmd := acquire("o2", 600_000)
	cmd.Machine = "m2"
	if got := young.proposeOnLeader(cmd).Value.(fsm.PortLease); got.Fence <= last.Fence {
		t.Errorf("fence after restore = %d, want above the restored %d", got.Fence, last.Fence)
	}
}

func TestNode_TransferLeadershipTo(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return c
	}
	li, leader := tc.leader()
	target := tc.nodes[(li+2)%3]
	follower := tc.nodes[(li+1)%3]

	if _, err := leader.TransferLeadershipTo(ctx(), "node-z"); !errors.Is(err, ErrUnknownServer) {
		t.Errorf("TransferLeadershipTo(unknown) error = %v, want %v", err, ErrUnknownServer)
	}
	if _, err := follower.TransferLeadershipTo(ctx(), ""); !errors.Is(err, ErrNotLeader) {
		t.Errorf("TransferLeadershipTo() on a follower error = %v, want %v", err, ErrNotLeader)
	}
	if p, err := leader.TransferLeadershipTo(ctx(), leader.ID()); err != nil || p != leader.FSM().Primary() {
		t.Errorf("TransferLeadershipTo(itself) = %+v, %v, want the current claim", p, err)
	}

	before := leader.FSM().Primary()
	p, err := leader.TransferLeadershipTo(ctx(), target.ID())
	if err != nil {
		t.Fatalf("TransferLeadershipTo(%s) error = %v", target.ID(), err)
	}
	if p.Holder != target.ID() || p.Generation <= before.Generation || leader.FSM().Primary() != p {
		t.Fatalf("TransferLeadershipTo(%s) = %+v, want %s's claim above generation %d, applied on the old leader", target.ID(), p, target.ID(), before.Generation)
	}
	// The new leader serves writes once the answer is given.
	testutil.WaitFor(t, target.ID()+" ready", 5*time.Second, target.Ready)
	mustPropose(t, target, register("after-transfer", 600_000))

	// Without a target, another voter takes over.
	p2, err := target.TransferLeadershipTo(ctx(), "")
	if err != nil {
		t.Fatalf("TransferLeadershipTo(\"\") error = %v", err)
	}
	if p2.Holder == target.ID() || p2.Generation <= p.Generation {
		t.Fatalf("TransferLeadershipTo(\"\") = %+v, want another holder above generation %d", p2, p.Generation)
	}
}

// gatedSnapshots is a snapshot store whose sinks, once armed, do not close
// until released: a follower installing a snapshot holds its raft main
// goroutine there and answers no heartbeat, as a follower busy restoring a
// large snapshot does.
type gatedSnapshots struct {
	raft.SnapshotStore
	mu   sync.Mutex
	gate chan struct{} // nil when not armed; guarded by mu
}

func (g *gatedSnapshots) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedSnapshots) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, t raft.Transport) (raft.SnapshotSink, error) {
	sink, err := g.SnapshotStore.Create(version, index, term, c, ci, t)
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	return gatedSink{SnapshotSink: sink, gate: gate}, err
}

type gatedSink struct {
	raft.SnapshotSink
	gate chan struct{}
}

func (s gatedSink) Close() error {
	if s.gate != nil {
		<-s.gate
	}
	return s.SnapshotSink.Close()
}

// The leader loses its lease while both followers are installing the
// restored snapshot (they answer no heartbeat meanwhile). The restore is not
// lost: every server that can win the next election holds it, Restore waits
// for the next leader's claim after the restored index and answers with it,
// and every node converges on the restored records.
func TestNode_RestoreSurvivesLeadershipLossDuringInstall(t *testing.T) {
	gates := make([]*gatedSnapshots, 3)
	tc := newTestCluster(t, 3, fileSnapshots(t, func(i int, c *Config) {
		gates[i] = &gatedSnapshots{SnapshotStore: c.Stores.Snapshots}
		c.Stores.Snapshots = gates[i]
	}))
	t.Cleanup(func() {
		for _, g := range gates {
			g.release()
		}
	})
	li, leader := tc.leader()
	mustPropose(t, leader, register("saved", 600_000))
	_, doc := backupOf(t, leader)
	mustPropose(t, leader, register("after", 600_000))
	b, err := fsm.ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	term := leader.raft.CurrentTerm()
	for i, g := range gates {
		if i != li {
			g.arm()
		}
	}
	type outcome struct {
		res RestoreResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := leader.Restore(ctx, b)
		done <- outcome{res, err}
	}()
	testutil.WaitFor(t, "the leader to lose its lease while the followers install", 10*time.Second, func() bool {
		return !leader.IsLeader()
	})
	for _, g := range gates {
		g.release()
	}
	out := <-done
	if out.err != nil {
		t.Fatalf("Restore() error = %v, want the restore confirmed by the next leader's claim", out.err)
	}
	if out.res.Primary.Generation <= term || out.res.Primary.Index <= out.res.Index {
		t.Fatalf("Restore() = %+v, want a claim of a term after %d at an index after %d", out.res, term, out.res.Index)
	}
	tc.waitConverged(out.res.Primary.Index)
	for _, n := range tc.nodes {
		if _, ok := n.FSM().Resource("machine:after"); ok {
			t.Errorf("%s holds machine:after, written after the backup", n.ID())
		}
		if _, ok := n.FSM().Resource("machine:saved"); !ok {
			t.Errorf("%s lost machine:saved", n.ID())
		}
	}
}

// A leader that cannot reach a quorum refuses a restore, which changes
// nothing: raft.Restore would commit it ahead of followers that may elect
// another leader without it.
func TestNode_RestoreNeedsAQuorum(t *testing.T) {
	tc := newTestCluster(t, 3, fileSnapshots(t, slowTimeouts(time.Second, time.Second)))
	li, leader := tc.leader()
	mustPropose(t, leader, register("saved", 600_000))
	_, doc := backupOf(t, leader)
	b, err := fsm.ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	tc.isolate(li)
	// RPCs answered after the cut but sent before it may still count for a
	// leadership check; once a check has failed, none is left in flight.
	testutil.WaitFor(t, "a leadership check to fail on the cut-off leader", 5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return leader.ReadIndex(ctx) != nil
	})
	if !leader.IsLeader() {
		t.Fatalf("the cut-off leader stepped down before the restore: its 1 s lease is too short for this machine")
	}
	before := leader.FSM().Hash() // nothing commits on the cut-off leader from here
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := leader.Restore(ctx, b); !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Restore() on a leader cut off from its followers error = %v, want no leader", err)
	}
	if got := leader.FSM().Hash(); got != before {
		t.Fatalf("state hash after a refused restore = %s, want %s", got, before)
	}
	if got := leader.ops.restored.Load(); got != 0 {
		t.Fatalf("a snapshot at %d was restored, want none", got)
	}
}
