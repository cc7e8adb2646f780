package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
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

// opsState serializes restores on a node.
type opsState struct {
	restoreMu sync.Mutex
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
// raft.Restore: on the ready leader it rebases the backup once (fsm.Backup's
// Rebase: TTLs rebased as on a claim onto this leader's clock, the claim
// this leader's at its term, the cluster's candidate directory and format
// level, indexes past every index used so far), installs those bytes as the
// latest snapshot and waits until a quorum has it; the other servers get the
// same bytes by InstallSnapshot. Proposals in flight at that moment answer
// ErrOutcomeUnknown (raft aborts them). The sweep loop and the batcher go on
// in the same term. Restores on one node run one at a time.
//
// Errors: ErrNotLeader (forward to Leader()), ErrNoLeader, ErrNotReady,
// ErrRestoreFailed and fsm.ErrSnapshotTooNew — none of them changed
// anything; ErrOutcomeUnknown — this node installed the backup but could not
// confirm a quorum did (leadership was lost, the deadline passed).
func (n *Node) Restore(ctx context.Context, b *fsm.Backup) (RestoreResult, error) {
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
	installed := n.fsm.AppliedIndex() == index && n.fsm.Primary().Index == index
	switch {
	case rerr != nil && !installed:
		if errors.Is(rerr, raft.ErrNotLeader) || errors.Is(rerr, raft.ErrLeadershipLost) {
			return RestoreResult{}, n.notLeader()
		}
		return RestoreResult{}, fmt.Errorf("%w: %v", ErrRestoreFailed, rerr)
	case rerr != nil:
		return RestoreResult{}, fmt.Errorf("%w: restore installed here, not confirmed by a quorum: %v", ErrOutcomeUnknown, rerr)
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
