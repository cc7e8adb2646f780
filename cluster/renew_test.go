package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
)

// renewCluster is a 3-node cluster renewing with a quarter-TTL slack, whose
// followers confirm through an in-memory probe that calls the leader's
// Confirm, as package api's POST /v1/cluster/confirm does.
func renewCluster(t *testing.T, slack float64) (*testCluster, int) {
	t.Helper()
	var tc *testCluster
	var mu sync.Mutex
	probe := func(ctx context.Context, leader Candidate, _ uint64) (Confirmation, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range tc.nodes {
			if n != nil && n.ID() == leader.Machine {
				return n.Confirm(ctx)
			}
		}
		return Confirmation{}, ErrNoLeader
	}
	mu.Lock()
	tc = newTestCluster(t, 3, func(_ int, c *Config) {
		c.RenewSlack = slack
		c.ConfirmProbe = probe
	})
	mu.Unlock()
	li := tc.readyLeader()
	for i := range tc.nodes {
		tc.waitFormat(i, fsm.MaxFormat)
	}
	return tc, li
}

func heartbeat(id string) fsm.HeartbeatResource {
	return fsm.HeartbeatResource{Caller: fsm.Caller{Owner: "o1"}, ID: id}
}

func mustRenew(t *testing.T, n *Node, cmd fsm.Command) Renewed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := n.Renew(ctx, cmd)
	if err != nil {
		t.Fatalf("Renew(%T) on %s error = %v", cmd, n.ID(), err)
	}
	return r
}

// renewM1Cluster is renewCluster(t, slack) with machine:m1 registered (TTL
// 60 s) on its leader; it returns the leader and a follower.
func renewM1Cluster(t *testing.T, slack float64) (tc *testCluster, leader, follower *Node) {
	t.Helper()
	tc, li := renewCluster(t, slack)
	leader, follower = tc.nodes[li], tc.nodes[(li+1)%3]
	mustPropose(t, leader, register("m1", 60_000))
	return tc, leader, follower
}

// mustRenewWrite renews cmd on the leader n once n's cluster time has passed
// the last applied time, so the renewal is a write with the slack. A renewal
// judged in the same millisecond as the record's write is covered by the
// record's own now + TTL and writes nothing, which leaves a record the next
// millisecond no longer covers.
func mustRenewWrite(t *testing.T, n *Node, cmd fsm.Command) Renewed {
	t.Helper()
	testutil.WaitFor(t, "the leader's clock past the last applied time", time.Second, func() bool {
		l := n.currentLead()
		return l != nil && l.now() > n.FSM().LastNow()
	})
	r := mustRenew(t, n, cmd)
	if !r.Wrote {
		t.Fatalf("renewal %T on %s wrote nothing, want a write with the slack", cmd, n.ID())
	}
	return r
}

// renewalEntriesAfter counts the heartbeat and lease renewal commands in node
// i's log after index, inside batches too. (Other entries, sweeps and the
// directory's upkeep, come and go on their own.)
func renewalEntriesAfter(tc *testCluster, i int, index uint64) int {
	n := len(tc.commandsAfter(i, index, fsm.HeartbeatResourceType)) + len(tc.commandsAfter(i, index, fsm.RenewLeaseType))
	for _, e := range tc.commandsAfter(i, index, fsm.BatchType) {
		cmd, _, _ := fsm.Decode(e.Data)
		for _, item := range cmd.(fsm.Batch).Commands {
			if item.Type == fsm.HeartbeatResourceType || item.Type == fsm.RenewLeaseType {
				n++
			}
		}
	}
	return n
}

func expiryOf(v any) int64 {
	switch r := v.(type) {
	case fsm.Resource:
		return r.ExpiresAt
	case fsm.PortLease:
		return r.ExpiresAt
	}
	return 0
}

// The first renewal of a fresh record is a write with the slack; the next
// ones, on the leader and on a follower, are answered from the state with no
// entry, each promising at least now + TTL.
func TestNode_RenewWithoutEntry(t *testing.T) {
	tc, li := renewCluster(t, 0.25)
	leader := tc.nodes[li]
	follower := tc.nodes[(li+1)%3]
	const ttl = 60_000
	mustPropose(t, leader, register("m1", ttl))
	lease := mustPropose(t, leader, acquire("o1", ttl)).Value.(fsm.PortLease)
	renewLease := fsm.RenewLease{Caller: fsm.Caller{Owner: "o1"}, Port: lease.Port, LeaseID: lease.LeaseID}

	first := mustRenewWrite(t, leader, heartbeat("machine:m1"))
	r := first.Value.(fsm.Resource)
	if got, lo := r.ExpiresAt-r.RenewedAt, int64(ttl+ttl/4); got != lo {
		t.Errorf("written heartbeat: expiresAt − renewedAt = %d, want TTL + slack %d", got, lo)
	}
	mustRenewWrite(t, leader, renewLease)
	tc.waitConverged(leader.FSM().AppliedIndex())

	last := leader.raft.LastIndex()
	for i := 0; i < 50; i++ {
		for _, n := range []*Node{leader, follower} {
			for _, cmd := range []fsm.Command{heartbeat("machine:m1"), renewLease} {
				before := time.Now().UnixMilli()
				got := mustRenew(t, n, cmd)
				if got.Wrote {
					t.Fatalf("renewal %d of %T on %s wrote an entry; the slack covers it", i, cmd, n.ID())
				}
				if exp := expiryOf(got.Value); exp < before+ttl {
					t.Fatalf("renewal %d of %T on %s promised %d, below now + TTL %d", i, cmd, n.ID(), exp, before+ttl)
				}
			}
		}
	}
	if got := renewalEntriesAfter(tc, li, last); got != 0 {
		t.Errorf("%d renewal commands entered the log during 200 covered renewals, want none", got)
	}
	if got := leader.renewals.outcomes[renewCovered].Load(); got < 100 {
		t.Errorf("leader counted %d covered renewals, want 100", got)
	}
	if got := follower.renewals.followerRounds.Load(); got == 0 {
		t.Errorf("follower ran no confirmation round")
	}
}

// Refusals are answered from confirmed state on every node, with no entry:
// unknown ids 404, another lease id 409.
func TestNode_RenewRefusalsWriteNothing(t *testing.T) {
	tc, li := renewCluster(t, 0.25)
	leader := tc.nodes[li]
	lease := mustPropose(t, leader, acquire("o1", 60_000)).Value.(fsm.PortLease)
	tc.waitConverged(leader.FSM().AppliedIndex())
	last := leader.raft.LastIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range tc.nodes {
		if _, err := n.Renew(ctx, heartbeat("machine:none")); !errors.Is(err, fsm.ErrNotFound) {
			t.Errorf("heartbeat of an unknown id on %s: error = %v, want ErrNotFound", n.ID(), err)
		}
		wrong := fsm.RenewLease{Caller: fsm.Caller{Owner: "o1"}, Port: lease.Port, LeaseID: "other"}
		if _, err := n.Renew(ctx, wrong); !errors.Is(err, fsm.ErrLeaseMismatch) {
			t.Errorf("renewal under another lease id on %s: error = %v, want ErrLeaseMismatch", n.ID(), err)
		}
	}
	if got := renewalEntriesAfter(tc, li, last); got != 0 {
		t.Errorf("%d renewal commands entered the log during refused renewals, want none", got)
	}
}

// A follower forwards (ErrNotLeader) a renewal the state does not cover, and
// one that changes attrs.
func TestNode_RenewFollowerForwardsWrites(t *testing.T) {
	tc, leader, follower := renewM1Cluster(t, 0.25)
	tc.waitConverged(leader.FSM().AppliedIndex())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := follower.Renew(ctx, heartbeat("machine:m1")); !errors.Is(err, ErrNotLeader) {
		t.Errorf("follower renewal of a fresh record: error = %v, want ErrNotLeader (forward: it needs a write)", err)
	}
	mustRenewWrite(t, leader, heartbeat("machine:m1"))
	tc.waitConverged(leader.FSM().AppliedIndex())
	withAttrs := heartbeat("machine:m1")
	withAttrs.Attrs = map[string]json.RawMessage{"load": json.RawMessage(`0.7`)}
	if _, err := follower.Renew(ctx, withAttrs); !errors.Is(err, ErrNotLeader) {
		t.Errorf("follower heartbeat with new attrs: error = %v, want ErrNotLeader (forward: it is a write)", err)
	}
	if _, err := follower.Renew(ctx, heartbeat("machine:m1")); err != nil {
		t.Errorf("follower renewal of a record the slack covers: error = %v, want an answer", err)
	}
}

// With the slack off (0) every renewal is a write.
func TestNode_RenewSlackOffWritesEveryRenewal(t *testing.T) {
	_, leader, follower := renewM1Cluster(t, 0)
	for i := 0; i < 5; i++ {
		if got := mustRenew(t, leader, heartbeat("machine:m1")); !got.Wrote {
			t.Fatalf("renewal %d with the slack off wrote nothing", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := follower.Renew(ctx, heartbeat("machine:m1")); !errors.Is(err, ErrNotLeader) {
		t.Errorf("follower renewal with the slack off: error = %v, want ErrNotLeader", err)
	}
}

// A leader cut off from the others cannot confirm a round, so once the others
// have elected a new leader it answers no renewal from its state: the new
// leader may have moved on.
func TestNode_RenewDeposedLeaderAnswersNothing(t *testing.T) {
	tc, li := renewCluster(t, 0.25)
	leader := tc.nodes[li]
	mustPropose(t, leader, register("m1", 60_000))
	mustRenew(t, leader, heartbeat("machine:m1"))
	tc.isolate(li)
	tc.readyLeader(li)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if r, err := leader.Renew(ctx, heartbeat("machine:m1")); err == nil {
		t.Fatalf("isolated leader answered a renewal from its state: %+v", r)
	}
	tc.heal()
}

// Many concurrent renewals share rounds: far fewer rounds than renewals. A
// burst during which leadership moved (every round of an election's window
// fails, and its renewals are forwarded, which is safe) is run again, up to
// three times.
func TestNode_RenewSharesRounds(t *testing.T) {
	tc, li := renewCluster(t, 0.25)
	mustPropose(t, tc.nodes[li], register("m1", 60_000))
	mustRenewWrite(t, tc.nodes[li], heartbeat("machine:m1"))
	const callers, each = 16, 20
	var leader, follower *Node
	var startLeader, startFollower uint64
	var errs chan error
	var forwarded atomic.Int64
	for attempt := 1; ; attempt++ {
		li = tc.readyLeader()
		leader, follower = tc.nodes[li], tc.nodes[(li+1)%3]
		tc.waitConverged(leader.FSM().AppliedIndex())
		term := leader.Raft().CurrentTerm()
		startLeader, startFollower = leader.renewals.leaderRounds.Load(), follower.renewals.followerRounds.Load()
		errs = make(chan error, callers*each)
		forwarded.Store(0)
		burst(follower, callers, each, errs, &forwarded)
		if leader.IsLeader() && leader.Raft().CurrentTerm() == term {
			break
		}
		t.Logf("burst %d: leadership moved during it (%d of %d forwarded)", attempt, forwarded.Load(), callers*each)
		if attempt == 3 {
			break
		}
	}
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent follower renewal: %v", err)
	}
	if n := forwarded.Load(); n > callers*each/2 {
		t.Errorf("%d of %d covered renewals were forwarded, want most answered by the follower", n, callers*each)
	}
	rounds := follower.renewals.followerRounds.Load() - startFollower
	if rounds == 0 || rounds >= callers*each {
		t.Errorf("%d follower rounds served %d renewals, want fewer rounds than renewals", rounds, callers*each)
	}
	testutil.WaitFor(t, "leader rounds counted", time.Second, func() bool {
		return leader.renewals.leaderRounds.Load() > startLeader
	})
}

// burst sends callers×each covered renewals to n from callers goroutines,
// counting the forwarded ones and sending every other failure to errs.
func burst(n *Node, callers, each int, errs chan<- error, forwarded *atomic.Int64) {
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := n.Renew(ctx, heartbeat("machine:m1"))
				cancel()
				switch {
				case errors.Is(err, ErrNotLeader):
					// A round that could not confirm in time (a loaded
					// machine): the caller forwards, which is always safe.
					forwarded.Add(1)
				case err == nil && r.Wrote:
					errs <- errors.New("a covered renewal wrote")
				case err != nil:
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
}
