package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// Operations (ARCHITECTURE.md, "Operations"): a consistent backup, a
// restore through raft.Restore, and a leadership transfer that answers once
// the new leader's claim is applied.

// Errors of the operations.
var (
	// ErrUnknownServer is returned by TransferLeadershipTo for a machine
	// that is not a voter of the Raft configuration. Nothing changed.
	ErrUnknownServer = errors.New("not a voter of the cluster")
	// ErrTransferFailed is returned by TransferLeadershipTo when raft could
	// not hand leadership over (the target did not catch up or did not win
	// in time, a transfer was already under way), or when another server
	// than the one asked for won. The cluster has a leader either way.
	ErrTransferFailed = errors.New("leadership transfer failed")
	// ErrRestoreFailed is returned by Restore when raft refused the restore
	// before it installed anything (a configuration change is being
	// committed, another restore runs, the snapshot could not be stored).
	// Nothing changed; retry.
	ErrRestoreFailed = errors.New("restore failed, nothing changed")
)

// opsState serializes restores on a node and notes what raft restored.
type opsState struct {
	restoreMu sync.Mutex
	// restored is the applied index of the last snapshot restored into the
	// state machine (see restoreTracker).
	restored atomic.Uint64
}

// restoreTracker is the node's state machine as raft sees it. It notes the
// applied index of every snapshot restored into it: a restore's snapshot
// carries an applied index no other snapshot has, so Restore can tell
// whether raft installed it before it returned an error.
type restoreTracker struct {
	*fsm.FSM
	ops *opsState
}

// Restore restores the snapshot and notes its applied index.
func (t restoreTracker) Restore(rc io.ReadCloser) error {
	if err := t.FSM.Restore(rc); err != nil {
		return err
	}
	t.ops.restored.Store(t.AppliedIndex())
	return nil
}

// Backup is a consistent copy of the replicated state for a snapshot save:
// the state (fsm.Export) and the leader's term when it was taken.
type Backup struct {
	fsm.Export
	Term uint64
}

// Backup copies the state for a snapshot save. It is a linearizable read:
// on the ready leader, after a ReadIndex, so the copy holds every write
// acknowledged before the call. The copy costs O(1) (see fsm.Export) and is
// written out by the caller while writes go on. On a follower it returns
// ErrNotLeader (the caller forwards); ErrNoLeader or ErrNotReady otherwise.
func (n *Node) Backup(ctx context.Context) (Backup, error) {
	if err := n.ReadIndex(ctx); err != nil {
		return Backup{}, err
	}
	term := n.raft.CurrentTerm()
	return Backup{Export: n.fsm.Export(), Term: term}, nil
}

// RestoreResult describes the state a restore installed.
type RestoreResult struct {
	// Index is the restored state's applied index and every table's change
	// index: above every index the backup or the cluster had used.
	Index uint64
	// Primary is the claim the restored state holds: this leader's, at its
	// current term.
	Primary fsm.Primary
	Counts  fsm.Counts
	Format  int
}

// Restore replaces the replicated state with a backup's, through
// raft.Restore: on the ready leader, once a quorum has confirmed its
// leadership (ReadIndex), it rebases the backup once (fsm.Backup's
// Rebase: TTLs rebased as on a claim onto this leader's clock, the claim
// this leader's at its term, the cluster's candidate directory and format
// level, indexes past every index used so far), installs those bytes as the
// latest snapshot and waits until a quorum has it; the other servers get the
// same bytes by InstallSnapshot. Proposals in flight at that moment answer
// ErrOutcomeUnknown (raft aborts them). The sweep loop and the batcher go on
// in the same term. Restores on one node run one at a time.
//
// If leadership is lost after this node installed the backup (a large
// snapshot keeps both followers busy installing it past the leader's lease),
// Restore waits for the next leader's claim: applied here after the restored
// index, it proves that leader holds the restore, and the result names it.
//
// Errors: ErrNotLeader (forward to Leader()), ErrNoLeader, ErrNotReady,
// ErrRestoreFailed and fsm.ErrSnapshotTooNew — none of them changed
// anything; ErrOutcomeUnknown — this node installed the backup but could not
// confirm a quorum did before ctx ended.
func (n *Node) Restore(ctx context.Context, b *fsm.Backup) (RestoreResult, error) {
	// A quorum must answer now: raft.Restore commits ahead of the
	// followers, and a leader cut off from them would install a state no
	// one else gets (raft's documented hazard).
	if err := n.ReadIndex(ctx); err != nil {
		return RestoreResult{}, err
	}
	l, err := n.readyLeadership()
	if err != nil {
		return RestoreResult{}, err
	}
	if !n.ops.restoreMu.TryLock() {
		return RestoreResult{}, fmt.Errorf("%w: another restore is under way on this node", ErrRestoreFailed)
	}
	defer n.ops.restoreMu.Unlock()

	index := max(b.MaxIndex(), n.raft.LastIndex()) + 1
	data, err := b.Rebase(fsm.RestoreParams{
		Holder: n.cfg.ID, Term: l.term, Now: l.now(), GraceMs: n.cfg.Grace.Milliseconds(),
		Index: index, Format: n.fsm.Format(), Candidates: n.fsm.Candidates(),
	})
	if err != nil {
		return RestoreResult{}, err
	}
	if _, err := n.readyLeadership(); err != nil || n.raft.CurrentTerm() != l.term {
		return RestoreResult{}, n.notLeader()
	}
	timeout := DefaultProposeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	// raft puts the snapshot at max(meta.Index, its last index) + 1, which
	// is at least index: every fence granted after it is above every
	// restored one.
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: index - 1, Term: l.term, Size: int64(len(data))}
	start := time.Now()
	rerr := n.raft.Restore(meta, bytes.NewReader(data), timeout)
	installed := n.ops.restored.Load() == index
	switch {
	case rerr != nil && !installed:
		if errors.Is(rerr, raft.ErrNotLeader) || errors.Is(rerr, raft.ErrLeadershipLost) {
			return RestoreResult{}, n.notLeader()
		}
		return RestoreResult{}, fmt.Errorf("%w: %v", ErrRestoreFailed, rerr)
	case rerr != nil:
		// Installed here, and leadership was lost before a quorum confirmed
		// it: typically the leader's lease ran out while both followers were
		// busy installing a large snapshot (they answer no heartbeat
		// meanwhile). Every server that can win the next election holds it
		// by then. A new leader's claim applied here after the restored
		// index proves it: that leader's log runs through the restore.
		n.log.Warn("leadership lost during a restore; waiting for the next leader's claim", "index", index, "err", rerr)
		p, err := n.waitClaimAfter(ctx, l.term, index)
		if err != nil {
			return RestoreResult{}, fmt.Errorf("%w: restore installed here, not confirmed by a quorum: %v (%v)", ErrOutcomeUnknown, rerr, err)
		}
		return RestoreResult{Index: index, Primary: p, Counts: n.fsm.Counts(), Format: n.fsm.Format()}, nil
	}
	n.log.Info("restored a backup", "index", index, "term", l.term, "bytes", len(data), "took", time.Since(start).Round(time.Millisecond))
	if p := n.fsm.Primary(); p.Holder != n.cfg.ID || p.Generation != n.raft.CurrentTerm() {
		// Leadership was lost and won again between the rebase and the
		// restore: the restored claim names an earlier term and replaced
		// this term's. Claim again.
		n.mu.Lock()
		cur := n.lead
		n.mu.Unlock()
		if cur == nil {
			return RestoreResult{}, fmt.Errorf("%w: leadership moved during the restore", ErrOutcomeUnknown)
		}
		if _, err := n.claim(ctx, cur); err != nil {
			return RestoreResult{}, fmt.Errorf("%w: claim after the restore: %v", ErrOutcomeUnknown, err)
		}
	}
	return RestoreResult{Index: index, Primary: n.fsm.Primary(), Counts: n.fsm.Counts(), Format: n.fsm.Format()}, nil
}

// TransferLeadershipTo hands leadership over — to the voter named to, or to
// the most up-to-date other voter when to is empty — and waits, bounded by
// ctx, until a new leader's claim is applied on this node, which it returns.
// If to already leads it returns the current claim at once.
//
// Errors: ErrNotLeader (forward to Leader()), ErrNoLeader, ErrNotReady;
// ErrUnknownServer; ErrTransferFailed (raft refused or the target did not
// win: see its message); ErrOutcomeUnknown (leadership moved but no new
// claim was applied here before ctx ended).
func (n *Node) TransferLeadershipTo(ctx context.Context, to string) (fsm.Primary, error) {
	if _, err := n.readyLeadership(); err != nil {
		if to != "" && errors.Is(err, ErrNotLeader) {
			if leader, ok := n.Leader(); ok && leader.Machine == to && n.Ready() {
				return n.fsm.Primary(), nil
			}
		}
		return fsm.Primary{}, err
	}
	before := n.fsm.Primary()
	if to == n.cfg.ID {
		return before, nil
	}
	var future raft.Future
	if to == "" {
		future = n.raft.LeadershipTransfer()
	} else {
		srv, ok := n.voter(to)
		if !ok {
			return fsm.Primary{}, fmt.Errorf("%w: %q", ErrUnknownServer, to)
		}
		future = n.raft.LeadershipTransferToServer(srv.ID, srv.Address)
	}
	done := make(chan error, 1)
	go func() { done <- future.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fsm.Primary{}, fmt.Errorf("%w: %v", ErrTransferFailed, err)
		}
	case <-ctx.Done():
		return fsm.Primary{}, fmt.Errorf("%w: leadership transfer: %v", ErrOutcomeUnknown, ctx.Err())
	}
	for {
		_, changed := n.fsm.Watch(fsm.TablePrimary)
		if p := n.fsm.Primary(); p.Generation > before.Generation {
			if to != "" && p.Holder != to {
				return p, fmt.Errorf("%w: %s won the election, not %s", ErrTransferFailed, p.Holder, to)
			}
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fsm.Primary{}, fmt.Errorf("%w: no new leader's claim applied here: %v", ErrOutcomeUnknown, ctx.Err())
		}
	}
}

// waitClaimAfter waits until this node has applied a claim of a term after
// term at an index after index, and returns it.
func (n *Node) waitClaimAfter(ctx context.Context, term, index uint64) (fsm.Primary, error) {
	for {
		_, changed := n.fsm.Watch(fsm.TablePrimary)
		if p := n.fsm.Primary(); p.Generation > term && p.Index > index {
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fsm.Primary{}, ctx.Err()
		}
	}
}

// voter returns the voter of the Raft configuration named id.
func (n *Node) voter(id string) (raft.Server, bool) {
	future := n.raft.GetConfiguration()
	if future.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range future.Configuration().Servers {
		if string(s.ID) == id && s.Suffrage == raft.Voter {
			return s, true
		}
	}
	return raft.Server{}, false
}
