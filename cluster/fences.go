package cluster

import (
	"context"
	"errors"
)

// ClusterTime returns the cluster time (Unix ms) a local read judges TTLs at
// (ARCHITECTURE.md, "Time model"). On the ready leader it is the lease clock
// a command proposed now would be stamped with, never below the latest
// applied time; elsewhere it is the latest applied time (fsm.FSM.LastNow),
// which lags the leader's clock by up to the sweep interval. A record with
// expiresAt at or before it is due: no command may renew it. Safe for
// concurrent use.
func (n *Node) ClusterTime() int64 {
	last := n.fsm.LastNow()
	if l, err := n.readyLeadership(); err == nil {
		return max(l.now(), last)
	}
	return last
}

// ConfirmedRead makes the next local read linearizable and returns the
// cluster time to judge TTLs at (ARCHITECTURE.md, "Fences for downstream").
// On the ready leader it joins a confirmation round (Confirm); on a follower
// with a ConfirmProbe it joins a follower round, as a renewal does: the
// leader confirms its leadership with a quorum after the call and tells its
// commit index and cluster time, and this node applies up to that index. The
// state it then holds includes every write acknowledged before the call, and
// the time returned is the leader's, so a follower answers as the leader
// would. On a follower without a probe, or when its round fails (the leader
// moved, the apply wait ran out), it returns ErrNotLeader: the caller
// forwards. Otherwise ErrNoLeader or ErrNotReady. Safe for concurrent use.
func (n *Node) ConfirmedRead(ctx context.Context) (int64, error) {
	l, err := n.readyLeadership()
	switch {
	case err == nil:
		c, err := n.leaderRounds.join(ctx)
		if err != nil {
			return 0, err
		}
		return max(c.Now, l.now(), n.fsm.LastNow()), nil
	case !errors.Is(err, ErrNotLeader):
		return 0, err
	}
	if n.confirmProbeFn() == nil {
		return 0, ErrNotLeader
	}
	c, err := n.followerRounds.join(ctx)
	if err != nil {
		n.log.Debug("confirmed read: confirmation with the leader failed; forwarding", "err", err)
		return 0, ErrNotLeader
	}
	return max(c.Now, n.fsm.LastNow()), nil
}
