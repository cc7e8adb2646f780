package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
)

func TestNode_ElectionClaimsPrimary(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	term := leader.raft.CurrentTerm()
	for i, n := range tc.nodes {
		testutil.WaitFor(t, "claim applied on every node", 5*time.Second, func() bool {
			p := n.FSM().Primary()
			return p.Holder == leader.ID() && p.Generation == term
		})
		testutil.WaitFor(t, "node ready", 5*time.Second, n.Ready)
		if i != li {
			got, ok := n.Leader()
			if !ok || got.Machine != leader.ID() {
				t.Errorf("node %d Leader() = %v, %v, want %s", i, got, ok, leader.ID())
			}
		}
	}
}

func TestNode_ProposeOnFollowerReturnsNotLeader(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li := tc.readyLeader()
	fi := (li + 1) % 3
	testutil.WaitFor(t, "follower knows leader", 5*time.Second, func() bool { _, ok := tc.nodes[fi].Leader(); return ok })
	_, err := tc.nodes[fi].Propose(context.Background(), acquire("o1", 1000))
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose() on follower error = %v, want ErrNotLeader", err)
	}
	if err := tc.nodes[fi].ReadIndex(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ReadIndex() on follower error = %v, want ErrNotLeader", err)
	}
	if err := tc.nodes[li].ReadIndex(context.Background()); err != nil {
		t.Fatalf("ReadIndex() on leader error = %v", err)
	}
}

func TestNode_ProposeReturnsDomainErrors(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	ctx := context.Background()
	lease := mustPropose(t, leader, acquire("o1", 60_000)).Value.(fsm.PortLease)
	if lease.Port != 31450 || lease.Generation != leader.raft.CurrentTerm() || lease.Fence == 0 {
		t.Fatalf("Propose(acquire) = %+v, want port 31450 with generation and fence", lease)
	}
	_, err := leader.Propose(ctx, fsm.RenewLease{Caller: fsm.Caller{Owner: "o1"}, Port: 31450, LeaseID: "other"})
	if !errors.Is(err, fsm.ErrLeaseMismatch) {
		t.Fatalf("Propose(renew other id) error = %v, want ErrLeaseMismatch", err)
	}
	_, err = leader.Propose(ctx, fsm.RenewLease{Caller: fsm.Caller{Owner: "o2"}, Port: 31450, LeaseID: lease.LeaseID})
	if !errors.Is(err, fsm.ErrForbidden) {
		t.Fatalf("Propose(renew other owner) error = %v, want ErrForbidden", err)
	}
	// The stamp comes from the leader's lease clock, not from the caller.
	if lease.GrantedAt < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("GrantedAt = %d, want the leader's clock", lease.GrantedAt)
	}
}

// A due lease expires on every node through a Sweep the leader commits, and
// the Sweep carries the leader's present time, not a later one: a lease with
// a minute left is held everywhere once the short one is gone, and no node's
// cluster time is ahead of the wall clock. (The leader's clock is its wall
// clock at the win plus monotonic time since, so only slew over the test
// can part them; sweepSlack covers it.)
func TestNode_SweepExpiresThroughLog(t *testing.T) {
	const sweepSlack = 100 * time.Millisecond
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	short := mustPropose(t, leader, acquire("o1", 150)).Value.(fsm.PortLease)
	res := mustPropose(t, leader, acquire("o2", 60_000))
	long, longIndex := res.Value.(fsm.PortLease), res.Index
	for _, n := range tc.nodes {
		// Both grants applied (the long one is the later entry), then the
		// short one gone: a lagging node that lacks it does not count.
		testutil.WaitFor(t, "lease swept on every node", 5*time.Second, func() bool {
			_, ok := n.FSM().Lease(short.Port)
			return n.FSM().AppliedIndex() >= longIndex && !ok
		})
		// Read the cluster time before the wall clock it is compared with.
		lastNow := n.FSM().LastNow()
		wall := time.Now().UnixMilli()
		if l, ok := n.FSM().Lease(long.Port); !ok || l.LeaseID != long.LeaseID {
			t.Errorf("%s: the lease on port %d with a minute left is gone once the short one was swept (cluster time %d, wall clock %d)",
				n.ID(), long.Port, lastNow, wall)
		}
		if lastNow > wall+sweepSlack.Milliseconds() {
			t.Errorf("%s: cluster time %d is %d ms ahead of the wall clock %d: a Sweep stamped the future", n.ID(), lastNow, lastNow-wall, wall)
		}
	}
}

// A leader cut off from the majority keeps proposing sweeps it cannot commit:
// the majority's leases survive under the new leader, with their remaining TTL.
func TestNode_FailoverKeepsLeasesAndDeposedSweepNeverCommits(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			tc := newTestCluster(t, 3, func(i int, c *Config) {
				c.WallClock = func() time.Time { return time.Now().Add(time.Duration(i) * skew) }
			})
			li, old := tc.leader()
			granted := mustPropose(t, old, acquire("o1", 30_000)).Value.(fsm.PortLease)
			for _, n := range tc.nodes {
				testutil.WaitFor(t, "lease replicated", 5*time.Second, func() bool { _, ok := n.FSM().Lease(31450); return ok })
			}
			tc.isolate(li)
			ni := tc.readyLeader(li)
			newLeader := tc.nodes[ni]
			p := newLeader.FSM().Primary()
			if p.Generation <= granted.Generation || p.Holder != newLeader.ID() {
				t.Fatalf("Primary() = %+v, want a later generation than %d held by %s", p, granted.Generation, newLeader.ID())
			}
			lease, ok := newLeader.FSM().Lease(31450)
			if !ok {
				t.Fatalf("lease lost across failover")
			}
			remaining := lease.ExpiresAt - p.ClaimedAt
			grace := tc.cfgs[ni].Grace.Milliseconds()
			if grace == 0 {
				grace = 2 * tc.cfgs[ni].ElectionTimeout.Milliseconds()
			}
			// The rebase keeps what was left (at most the TTL) and adds the grace.
			if remaining <= grace || remaining > 30_000+grace {
				t.Fatalf("remaining after claim = %d ms, want in (%d, %d]", remaining, grace, 30_000+grace)
			}
			// The deposed leader can no longer commit anything.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := old.Propose(ctx, fsm.ReleaseLease{Caller: fsm.Caller{Owner: "o1"}, Port: 31450, LeaseID: granted.LeaseID}); err == nil {
				t.Fatalf("Propose() on deposed leader succeeded")
			}
			if _, ok := newLeader.FSM().Lease(31450); !ok {
				t.Fatalf("deposed leader's release reached the majority")
			}
		})
	}
}

// With no quorum anywhere, Propose and ReadIndex answer ErrNoLeader ("not
// applied, retry after an election") on every node at once, whatever the
// caller's deadline. The deadline here is ten times the API's 1 s contract:
// an implementation that waited for a leader until the deadline would answer
// ErrOutcomeUnknown or a context error instead, and one that sent the caller
// to a leader would answer ErrNotLeader.
func TestNode_NoLeaderFailsFast(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.readyLeader()
	for i := range tc.nodes {
		tc.isolate(i)
	}
	for _, n := range tc.nodes {
		testutil.WaitFor(t, n.ID()+" to know no leader", 5*time.Second, func() bool {
			_, known := n.Leader()
			return !known && !n.IsLeader()
		})
	}
	for _, n := range tc.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := n.Propose(ctx, acquire("o1", 1000))
		rerr := n.ReadIndex(ctx)
		expired := ctx.Err()
		cancel()
		for _, got := range []struct {
			call string
			err  error
		}{{"Propose()", err}, {"ReadIndex()", rerr}} {
			if !errors.Is(got.err, ErrNoLeader) || errors.Is(got.err, ErrOutcomeUnknown) || errors.Is(got.err, context.DeadlineExceeded) {
				t.Errorf("%s on %s without quorum error = %v, want ErrNoLeader", got.call, n.ID(), got.err)
			}
		}
		if expired != nil {
			t.Errorf("%s: Propose() and ReadIndex() without quorum ran into the caller's 10 s deadline, want an answer without waiting", n.ID())
		}
	}
}
