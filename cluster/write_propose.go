package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// DefaultProposeTimeout bounds a Propose whose context has no deadline.
const DefaultProposeTimeout = 10 * time.Second

// Applied is the outcome of a committed command: the FSM's result and the
// log index of the entry that carried it. Once a node's state machine has
// applied Index, a local read on that node sees the command's effect.
type Applied struct {
	Value any
	Index uint64
}

// Propose stamps cmd with the leader's clock, replicates it and returns the
// FSM's result with the entry's index. It succeeds only on the leader once
// its claim is applied, and returns once this node's FSM applied the entry.
//
// Errors: ErrNotLeader (forward to Leader()), ErrNoLeader, ErrNotReady — none
// of them applied anything; ErrOutcomeUnknown — it may have been applied;
// otherwise the domain error Apply returned (package fsm's errors), with
// Applied.Index set: a refused command is still an applied entry.
func (n *Node) Propose(ctx context.Context, cmd fsm.Command) (Applied, error) {
	l, err := n.readyLeadership()
	if err != nil {
		return Applied{}, err
	}
	// An acquire is never batched: its fence is its entry's index, which no
	// other grant may share. Acquires go out as entries of their own, which
	// raft still writes to disk together (BatchApply). So does a command a
	// batch may not hold (fsm.Batchable: a limits change); in a batch it
	// would make the whole batch, and every write queued with it, refused.
	if l.batcher != nil && n.fsm.Format() >= 2 && cmd.Type() != fsm.AcquireLeaseType && fsm.Batchable(cmd.Type()) {
		return l.batcher.propose(ctx, cmd)
	}
	return n.apply(ctx, fsm.Stamp(cmd, l.now()), 0)
}

// readyLeadership returns this node's leadership if its claim is applied.
func (n *Node) readyLeadership() (*leadership, error) {
	n.mu.Lock()
	l, closed := n.lead, n.closed
	n.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case l == nil:
		leader, ok := n.Leader()
		switch {
		case ok && leader.Machine == n.cfg.ID:
			// Raft made us leader; the notification is on its way.
			return nil, ErrNotReady
		case ok:
			return nil, ErrNotLeader
		}
		return nil, ErrNoLeader
	case !l.isReady():
		return nil, ErrNotReady
	}
	return l, nil
}

// apply hands an encoded command to raft and waits for the outcome.
func (n *Node) apply(ctx context.Context, cmd fsm.Command, timeout time.Duration) (Applied, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return Applied{}, err
	}
	if timeout == 0 {
		timeout = DefaultProposeTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
	}
	if timeout <= 0 {
		return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, context.DeadlineExceeded)
	}
	start := time.Now()
	future := n.raft.Apply(data, timeout)
	done := make(chan error, 1)
	go func() { done <- future.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, ctx.Err())
	case <-n.stop:
		// With raft.batch_apply an entry still queued when raft shuts
		// down never gets an answer: do not wait for one after Close.
		return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, ErrClosed)
	}
	n.observeApply(time.Since(start), err)
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			if _, ok := n.Leader(); ok {
				return Applied{}, ErrNotLeader
			}
			return Applied{}, ErrNoLeader
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return Applied{}, fmt.Errorf("%w: %v", ErrNoLeader, err)
		case errors.Is(err, raft.ErrLeadershipTransferInProgress):
			// Refused before it entered the log: the caller waits for the
			// next leader, as it does for one that has not claimed yet.
			return Applied{}, fmt.Errorf("%w: %v", ErrNotReady, err)
		case errors.Is(err, raft.ErrRaftShutdown):
			return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
		default: // ErrLeadershipLost and anything else after enqueue
			return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
		}
	}
	out := Applied{Index: future.Index()}
	resp := future.Response()
	if rerr, ok := resp.(error); ok {
		return out, rerr
	}
	out.Value = resp
	return out, nil
}

// ReadIndex makes the next local read linearizable: on the leader it takes the
// commit index, confirms leadership with a quorum and waits until the state
// machine has applied that index. Concurrent callers share one such round
// (renew.go): each waits for a round that began after it called. On a
// follower it returns ErrNotLeader (the caller forwards) or ErrNoLeader.
func (n *Node) ReadIndex(ctx context.Context) error {
	if _, err := n.readyLeadership(); err != nil {
		return err
	}
	_, err := n.leaderRounds.join(ctx)
	return err
}

// waitApplied waits until the FSM has applied every command up to index.
// Entries that never reach the FSM (no-ops, barriers, configuration) do not
// count: after this leader's claim every entry is a command, and the claim
// itself is applied before the node is ready.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	target := n.lastCommandAtOrBefore(index)
	return waitIndex(ctx, target, n.fsm.AppliedIndex)
}

// waitIndex polls applied every 200 µs until it reaches index or ctx ends.
func waitIndex(ctx context.Context, index uint64, applied func() uint64) error {
	if applied() >= index {
		return nil
	}
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for applied() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: wait for index %d: %v", ErrNoLeader, index, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// lastCommandAtOrBefore walks back from index to the last LogCommand entry.
func (n *Node) lastCommandAtOrBefore(index uint64) uint64 {
	store := n.logStore()
	if store == nil {
		return index
	}
	var entry raft.Log
	for i := index; i > 0 && i+64 > index; i-- {
		if err := store.GetLog(i, &entry); err != nil {
			return min(index, n.fsm.AppliedIndex())
		}
		if entry.Type == raft.LogCommand {
			return i
		}
	}
	return n.fsm.AppliedIndex()
}
