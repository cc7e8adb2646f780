package cluster

import (
	"context"

	"github.com/elanous/elanous-node/fsm"
)

// Precheck judges cmd against this node's applied state at the leader's
// current cluster time (fsm.FSM.Precheck), without proposing it: an error is
// the domain error Apply would return (fsm.ErrNotFound, ErrForbidden,
// ErrLeaseMismatch, ErrTokenRevoked, ...), and the caller answers it without a
// log entry. A heartbeat for an id that does not exist then costs no disk
// write on any replica (ARCHITECTURE.md, "The write path").
//
// It judges only on the ready leader, whose applied state holds every entry
// of earlier terms (its claim is applied after a barrier). Elsewhere it
// returns nil: Propose decides, and the caller forwards. It is advice, as
// fsm.FSM.Precheck is: Apply still decides, so a command Precheck passed may
// still be refused if the state changes before it is applied. Safe for
// concurrent use.
//
// A refusal is an answer read from the state, so it must be linearizable:
// a node that still believes it leads after the cluster moved on would
// otherwise refuse from a stale state (answer 409 to the release of a lease
// the new leader has granted). So a refusal is confirmed as a ReadIndex read is: the
// leader takes its commit index, confirms its leadership with a quorum,
// waits until it has applied that index, and judges again. When that fails
// (it no longer leads, ctx ends) Precheck returns nil and Propose decides.
func (n *Node) Precheck(ctx context.Context, cmd fsm.Command) error {
	l, err := n.readyLeadership()
	if err != nil {
		return nil
	}
	if n.fsm.Precheck(cmd, l.now()) == nil {
		return nil
	}
	if err := n.ReadIndex(ctx); err != nil {
		return nil
	}
	return n.fsm.Precheck(cmd, l.now())
}

// Lagging reports whether this node holds log entries it has not applied:
// entries it knows are committed (its applied index is behind the commit
// index the leader told it), or entries it has received and not yet learned
// are committed. A follower that lags may not know a machine token the
// leader issued a moment ago; one that does not lag has applied everything it
// has heard of, so a token it does not know was not issued before the last
// entry it received.
func (n *Node) Lagging() bool {
	applied := n.raft.AppliedIndex()
	return n.raft.CommitIndex() > applied || n.raft.LastIndex() > applied
}
