package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// Renewals without a log entry (ARCHITECTURE.md, "Renewals").
//
// A heartbeat or a lease renewal asks that the replicated state hold
// expiresAt ≥ now + TTL at the leader's cluster time now. When the applied
// state already holds it, and that state is confirmed current as a ReadIndex
// read is (a quorum confirmed this leader after the renewal arrived, and
// everything up to the commit index taken before that is applied), the
// renewal is answered from the state and writes nothing. Otherwise it is
// proposed with a slack (Config.RenewSlack), which renews to now + TTL + S and
// lets the next renewals find the record covered.
//
// A follower judges renewals itself: it asks the leader, once for every
// renewal waiting on it, to confirm its leadership and tell its commit index
// and cluster time (ConfirmProbe), applies up to that index and judges each
// renewal at the leader's time. Only the renewals that need a write go to the
// leader. Its answers are the leader's: the same state, the same time.

// Confirmation is the answer of one confirmation round: the leader's commit
// index taken after the round began, the term in which a quorum confirmed its
// leadership, and its cluster time once confirmed (Unix ms).
type Confirmation struct {
	Index uint64
	Term  uint64
	Now   int64
}

// ConfirmProbe asks the leader for a Confirmation (package api sends POST
// /v1/cluster/confirm). applied is this node's applied index, so the leader
// can announce its commit index when the follower is behind it.
type ConfirmProbe func(ctx context.Context, leader Candidate, applied uint64) (Confirmation, error)

// SetConfirmProbe sets how a follower confirms renewals with the leader.
// Without one a follower forwards every renewal.
func (n *Node) SetConfirmProbe(p ConfirmProbe) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.confirmProbe = p
}

// Renewal outcomes, as elanous_renewals_total counts them.
const (
	renewCovered   = iota // answered from confirmed state, no entry
	renewWritten          // proposed with slack
	renewRefused          // refused from confirmed state (404, 403, 409), no entry
	renewForwarded        // a follower sent it to the leader
	numRenewOutcomes
)

var renewOutcomeNames = [numRenewOutcomes]string{"covered", "written", "refused", "forwarded"}

// renewStats counts renewal outcomes and confirmation rounds.
type renewStats struct {
	outcomes       [numRenewOutcomes]atomic.Uint64
	leaderRounds   atomic.Uint64
	followerRounds atomic.Uint64
}

// roundTimeout bounds one confirmation round, whoever waits on it.
const roundTimeout = 2 * time.Second

// minRoundGap is the least time between the starts of two rounds run back to
// back (rounds.loop).
const minRoundGap = time.Millisecond

// followerApplyWait bounds how long a follower waits to apply up to the
// leader's commit index before it forwards the renewal instead.
const followerApplyWait = 200 * time.Millisecond

// Renewed is the answer to a renewal: the record (fsm.Resource or
// fsm.PortLease), the index of the entry that wrote it (0 when none was
// written) and whether an entry was written.
type Renewed struct {
	Value any
	Index uint64
	Wrote bool
}

// renewSlack is the slack of a renewal of a record with TTL ttlMs: the
// configured fraction of the TTL, capped by RenewSlackMax.
func (n *Node) renewSlack(ttlMs int64) int64 {
	s := int64(n.cfg.RenewSlack * float64(ttlMs))
	if limit := n.cfg.RenewSlackMax.Milliseconds(); limit > 0 {
		s = min(s, limit)
	}
	return max(s, 0)
}

// judging reports whether renewals are judged against the state: the slack is
// on and every replica applies renewals at format 3.
func (n *Node) judging() bool {
	return n.cfg.RenewSlack > 0 && n.fsm.Format() >= 3
}

// Renew answers a heartbeat (fsm.HeartbeatResource) or a lease renewal
// (fsm.RenewLease) without a log entry when the confirmed applied state
// already covers it, and proposes it with the slack otherwise.
//
// On the leader it returns the answer, or the domain error the renewal is
// refused with (confirmed, as a ReadIndex read is), or Propose's errors. On
// a follower it answers covered renewals and confirmed refusals itself and
// returns ErrNotLeader for the others, which the caller forwards. With the
// slack off, or below format 3, it proposes on the leader as Propose does and
// returns ErrNotLeader on a follower. Safe for concurrent use.
func (n *Node) Renew(ctx context.Context, cmd fsm.Command) (Renewed, error) {
	if !fsm.IsRenewal(cmd) {
		return Renewed{}, fmt.Errorf("%w: %T is not a renewal", fsm.ErrInvalidCommand, cmd)
	}
	l, err := n.readyLeadership()
	switch {
	case err == nil:
		return n.renewOnLeader(ctx, l, cmd)
	case errors.Is(err, ErrNotLeader):
		return n.renewOnFollower(ctx, cmd)
	}
	return Renewed{}, err
}

func (n *Node) renewOnLeader(ctx context.Context, l *leadership, cmd fsm.Command) (Renewed, error) {
	if !n.judging() {
		return n.proposeRenewal(ctx, cmd)
	}
	// A renewal the applied state does not cover is a write whatever a
	// confirmation would say (Apply decides, and writing is always safe):
	// only an answer from the state, covered or refused, waits for one.
	if j, err := n.fsm.JudgeRenewal(cmd, l.now()); err == nil && !j.Covered {
		return n.proposeRenewal(ctx, fsm.WithSlack(cmd, n.renewSlack(j.TTLMs)))
	}
	if _, err := n.leaderRounds.join(ctx); err != nil {
		return Renewed{}, err
	}
	j, err := n.fsm.JudgeRenewal(cmd, l.now())
	if r, answered, err := n.answerFromState(j, err); answered {
		return r, err
	}
	return n.proposeRenewal(ctx, fsm.WithSlack(cmd, n.renewSlack(j.TTLMs)))
}

// answerFromState answers a renewal judged (j, err) after a confirmation
// round when the state decides it: a refusal, or the value of a record the
// state covers; each counts in its outcome. answered is false when the
// renewal needs a write.
func (n *Node) answerFromState(j fsm.Renewal, err error) (r Renewed, answered bool, _ error) {
	switch {
	case err != nil:
		n.renewals.outcomes[renewRefused].Add(1)
		return Renewed{}, true, err
	case j.Covered:
		n.renewals.outcomes[renewCovered].Add(1)
		return Renewed{Value: j.Value}, true, nil
	}
	return Renewed{}, false, nil
}

func (n *Node) proposeRenewal(ctx context.Context, cmd fsm.Command) (Renewed, error) {
	if !n.judging() {
		// Without judgment a refusal is still answered without an entry.
		if err := n.Precheck(ctx, cmd); err != nil {
			n.renewals.outcomes[renewRefused].Add(1)
			return Renewed{}, err
		}
	}
	a, err := n.Propose(ctx, cmd)
	if err == nil {
		n.renewals.outcomes[renewWritten].Add(1)
	}
	return Renewed{Value: a.Value, Index: a.Index, Wrote: err == nil}, err
}

func (n *Node) renewOnFollower(ctx context.Context, cmd fsm.Command) (Renewed, error) {
	if !n.judging() || n.confirmProbeFn() == nil {
		n.renewals.outcomes[renewForwarded].Add(1)
		return Renewed{}, ErrNotLeader
	}
	// As on the leader, a renewal this node's state does not cover goes to
	// the leader at once: only an answer from the state needs confirming.
	// (Its state may be behind the leader's, which only means the leader
	// may find it covered after all.)
	if j, err := n.fsm.JudgeRenewal(cmd, n.fsm.LastNow()); err == nil && !j.Covered {
		n.renewals.outcomes[renewForwarded].Add(1)
		return Renewed{}, ErrNotLeader
	}
	c, err := n.followerRounds.join(ctx)
	if err != nil {
		n.log.Debug("renewal: confirmation with the leader failed; forwarding", "err", err)
		n.renewals.outcomes[renewForwarded].Add(1)
		return Renewed{}, ErrNotLeader
	}
	if r, answered, err := n.answerFromState(n.fsm.JudgeRenewal(cmd, c.Now)); answered {
		return r, err
	}
	n.renewals.outcomes[renewForwarded].Add(1)
	return Renewed{}, ErrNotLeader
}

func (n *Node) confirmProbeFn() ConfirmProbe {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.confirmProbe
}

// Confirm runs (or joins) a confirmation round on the leader and returns its
// answer: the commit index, the term and the cluster time, once a quorum has
// confirmed this node's leadership after the call and the state machine has
// applied that index. It is what a follower's ConfirmProbe reaches. Errors:
// ErrNotLeader, ErrNoLeader, ErrNotReady.
func (n *Node) Confirm(ctx context.Context) (Confirmation, error) {
	return n.leaderRounds.join(ctx)
}

// leaderRound is one round on the leader: the commit index, then a quorum's
// confirmation of this leadership, then the wait to apply that index.
func (n *Node) leaderRound(ctx context.Context) (Confirmation, error) {
	l, err := n.readyLeadership()
	if err != nil {
		return Confirmation{}, err
	}
	n.renewals.leaderRounds.Add(1)
	index := n.raft.CommitIndex()
	if err := n.verifyLeader(ctx); err != nil {
		return Confirmation{}, err
	}
	if err := n.waitApplied(ctx, index); err != nil {
		return Confirmation{}, err
	}
	if n.currentLead() != l {
		return Confirmation{}, ErrNotLeader
	}
	return Confirmation{Index: index, Term: l.term, Now: l.now()}, nil
}

// followerRound is one round on a follower: the leader's confirmation, then
// the wait to apply up to its commit index. The state is then the leader's
// as of the confirmation, with the leader's claim of that term in it.
func (n *Node) followerRound(ctx context.Context) (Confirmation, error) {
	probe := n.confirmProbeFn()
	leader, ok := n.Leader()
	if probe == nil || !ok || leader.Machine == n.cfg.ID {
		return Confirmation{}, ErrNoLeader
	}
	n.renewals.followerRounds.Add(1)
	c, err := probe(ctx, leader, n.fsm.AppliedIndex())
	if err != nil {
		return Confirmation{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, followerApplyWait)
	defer cancel()
	if err := n.waitRaftApplied(wctx, c.Index); err != nil {
		return Confirmation{}, err
	}
	if err := n.waitApplied(wctx, c.Index); err != nil {
		return Confirmation{}, err
	}
	if g := n.fsm.Primary().Generation; g != c.Term {
		return Confirmation{}, fmt.Errorf("%w: applied generation %d, the leader confirmed term %d", ErrNotReady, g, c.Term)
	}
	return c, nil
}

// verifyLeader asks a quorum to confirm this node's leadership.
func (n *Node) verifyLeader(ctx context.Context) error {
	verify := n.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- verify.Error() }()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if _, ok := n.Leader(); ok && !errors.Is(err, raft.ErrRaftShutdown) {
			return ErrNotLeader
		}
		return fmt.Errorf("%w: %v", ErrNoLeader, err)
	case <-ctx.Done():
		return fmt.Errorf("%w: verify leader: %v", ErrNoLeader, ctx.Err())
	}
}

// waitRaftApplied waits until raft has handed every entry up to index to the
// state machine (a follower may not hold the entry at index yet, so the
// walk back to its last command must wait for it).
func (n *Node) waitRaftApplied(ctx context.Context, index uint64) error {
	return waitIndex(ctx, index, n.raft.AppliedIndex)
}

func (n *Node) currentLead() *leadership {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lead
}

// rounds shares confirmation rounds among their callers: a caller joins the
// next round to start, never one already running (which may have taken its
// commit index before the caller arrived), so one round serves every caller
// that arrived while the previous one ran.
type rounds struct {
	run  func(context.Context) (Confirmation, error)
	stop <-chan struct{}

	mu      sync.Mutex
	running bool
	next    *round
}

type round struct {
	done chan struct{}
	res  Confirmation
	err  error
}

// join waits for the next round to end and returns its answer, or ctx's
// error.
func (rs *rounds) join(ctx context.Context) (Confirmation, error) {
	rs.mu.Lock()
	r := rs.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		rs.next = r
	}
	if !rs.running {
		rs.running = true
		go rs.loop() //nolint:gosec // G118: a round serves every caller waiting on it, not this one; roundTimeout and the node's stop bound it
	}
	rs.mu.Unlock()
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		return Confirmation{}, fmt.Errorf("%w: confirmation round: %v", ErrNoLeader, ctx.Err())
	}
}

// loop runs rounds while callers wait for one. A round that begins while
// callers are already waiting (they arrived during the previous round: the
// node is busy) begins no sooner than minRoundGap after the previous one
// began, so it serves more of them at once: a round costs a quorum's
// heartbeats or a request to the leader whatever it serves. A caller that
// finds no round running starts one at once.
func (rs *rounds) loop() {
	var last time.Time
	for {
		if wait := minRoundGap - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-rs.stop:
				t.Stop()
			}
		}
		rs.mu.Lock()
		r := rs.next
		rs.next = nil
		if r == nil {
			rs.running = false
			rs.mu.Unlock()
			return
		}
		rs.mu.Unlock()
		last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
		go func() {
			select {
			case <-rs.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		r.res, r.err = rs.run(ctx)
		cancel()
		close(r.done)
	}
}
