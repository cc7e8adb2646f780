package cluster

import (
	"context"
	"errors"
	"testing"
)

// ConfirmedRead on the leader confirms a round and returns its cluster time;
// a follower without a ConfirmProbe answers ErrNotLeader (the caller
// forwards); with one, it applies up to the leader's confirmed commit index
// (a write made on the leader just before is in its state) and returns the
// leader's time.
func TestNode_ConfirmedRead(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	fi := (li + 1) % len(tc.nodes)
	follower := tc.nodes[fi]

	now, err := leader.ConfirmedRead(context.Background())
	if err != nil || now < leader.FSM().LastNow() || now == 0 {
		t.Fatalf("leader ConfirmedRead() = %d, %v, want a cluster time at least LastNow %d", now, err, leader.FSM().LastNow())
	}
	if _, err := follower.ConfirmedRead(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower ConfirmedRead() without a probe error = %v, want ErrNotLeader", err)
	}

	var asked Confirmation
	follower.SetConfirmProbe(func(ctx context.Context, _ Candidate, _ uint64) (Confirmation, error) {
		c, err := leader.Confirm(ctx)
		asked = c
		return c, err
	})
	mustPropose(t, leader, register("confirmed", 600_000))
	got, err := follower.ConfirmedRead(context.Background())
	if err != nil {
		t.Fatalf("follower ConfirmedRead() with a probe error = %v", err)
	}
	if got < asked.Now {
		t.Errorf("follower ConfirmedRead() = %d, want at least the leader's confirmed time %d", got, asked.Now)
	}
	if _, ok := follower.FSM().Resource("machine:confirmed"); !ok {
		t.Errorf("after ConfirmedRead the follower's state lacks the write the leader acknowledged before it")
	}
	if applied := follower.FSM().AppliedIndex(); applied < asked.Index {
		t.Errorf("follower applied index %d, want at least the confirmed commit index %d", applied, asked.Index)
	}

	follower.SetConfirmProbe(func(context.Context, Candidate, uint64) (Confirmation, error) {
		return Confirmation{}, ErrNoLeader
	})
	if _, err := follower.ConfirmedRead(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Errorf("follower ConfirmedRead() with a failing probe error = %v, want ErrNotLeader (forward)", err)
	}
}
