package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/elanous/elanous-node/fsm"
)

// Group commit (ARCHITECTURE.md, "The write path"): while entries are on
// their way through Raft, concurrent proposals queue up and leave together as
// one fsm.Batch entry; each caller still waits for its own commit and gets its
// own result. A batch is flushed as soon as a pipeline slot is free, so a lone
// write is proposed at once, as a plain entry, and waits for nothing.

// Batching limits (ARCHITECTURE.md §2, group commit; the batch size's
// default is raft.max_batch's, config/defaults.MaxBatch). One entry in flight: the next batch fills while it is on
// its way and leaves as soon as it is applied, so a write costs fewer boltdb
// commits, AppendEntries and applies than with a second entry in flight
// (BenchmarkHTTP_ResourceHeartbeat reports commands/batch). Acquires are not
// batched (see Propose).
const defaultMaxInflight = 1

// proposal is one caller's command on its way into a batch.
type proposal struct {
	cmd   fsm.Command
	state atomic.Int32 // proposalQueued, then proposalTaken or proposalAbandoned
	done  chan proposed
}

const (
	proposalQueued int32 = iota
	proposalTaken
	proposalAbandoned
)

// proposed is a proposal's outcome.
type proposed struct {
	applied Applied
	err     error
}

// batcher forms batches for one term of leadership. It stops with the term;
// proposals it never handed to Raft then fail with ErrNotLeader (nothing was
// applied, so the caller may forward or retry).
type batcher struct {
	n           *Node
	l           *leadership
	in          chan *proposal
	maxBatch    int
	maxInflight int
	stopped     chan struct{}
}

func newBatcher(n *Node, l *leadership) *batcher {
	return &batcher{
		n: n, l: l,
		in:          make(chan *proposal, 1024),
		maxBatch:    n.cfg.MaxBatch,
		maxInflight: n.cfg.MaxInflight,
		stopped:     make(chan struct{}),
	}
}

// propose queues cmd and waits for its outcome (see Node.Propose).
func (b *batcher) propose(ctx context.Context, cmd fsm.Command) (Applied, error) {
	p := &proposal{cmd: cmd, done: make(chan proposed, 1)}
	select {
	case b.in <- p:
	case <-b.stopped:
		return Applied{}, b.n.notLeader()
	case <-ctx.Done():
		return Applied{}, fmt.Errorf("%w: queue for a batch: %v", ErrNoLeader, ctx.Err())
	}
	stopped := b.stopped
	for {
		select {
		case r := <-p.done:
			return r.applied, r.err
		case <-stopped:
			// The term ended; a proposal still queued was never handed to
			// Raft. One already taken gets its outcome on done.
			if p.state.CompareAndSwap(proposalQueued, proposalAbandoned) {
				return Applied{}, b.n.notLeader()
			}
			stopped = nil
		case <-ctx.Done():
			if p.state.CompareAndSwap(proposalQueued, proposalAbandoned) {
				// Never handed to Raft: not applied.
				return Applied{}, fmt.Errorf("%w: waited for a batch: %v", ErrNoLeader, ctx.Err())
			}
			return Applied{}, fmt.Errorf("%w: %v", ErrOutcomeUnknown, ctx.Err())
		}
	}
}

// run forms and sends batches until ctx ends (the term is over).
func (b *batcher) run(ctx context.Context) {
	var (
		pending  []*proposal
		inflight int
		wg       sync.WaitGroup
	)
	slot := make(chan struct{}, b.maxInflight)
	defer func() {
		close(b.stopped)
		wg.Wait()
		for _, p := range pending {
			p.fail(b.n.notLeader())
		}
		for {
			select {
			case p := <-b.in:
				p.fail(b.n.notLeader())
			default:
				return
			}
		}
	}()
	for {
		if len(pending) == 0 {
			select {
			case p := <-b.in:
				pending = append(pending, p)
			case <-slot:
				inflight--
				continue
			case <-ctx.Done():
				return
			}
		}
		// Take whatever else is already queued.
	drain:
		for len(pending) < 4*b.maxBatch {
			select {
			case p := <-b.in:
				pending = append(pending, p)
			default:
				break drain
			}
		}
		if inflight >= b.maxInflight {
			select {
			case <-slot:
				inflight--
			case p := <-b.in:
				pending = append(pending, p)
			case <-ctx.Done():
				return
			}
			continue
		}
		var batch []*proposal
		batch, pending = b.take(pending)
		if len(batch) == 0 {
			continue
		}
		inflight++
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.send(ctx, batch)
			slot <- struct{}{}
		}()
	}
}

// take picks the next batch from pending: up to maxBatch live proposals in
// order; the rest wait for the next batch. (Acquires never come here: Propose
// sends each as an entry of its own, so a batch never holds two grants.)
func (b *batcher) take(pending []*proposal) (batch, rest []*proposal) {
	for i, p := range pending {
		if len(batch) == b.maxBatch {
			rest = append(rest, pending[i:]...)
			break
		}
		if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
			batch = append(batch, p)
		} // else its caller gave up
	}
	return batch, rest
}

// send stamps the batch with the leader's clock, proposes it as one entry (a
// plain command when it holds one) and hands each caller its result.
func (b *batcher) send(ctx context.Context, batch []*proposal) {
	now := b.l.now()
	if len(batch) == 1 {
		applied, err := b.n.apply(ctx, fsm.Stamp(batch[0].cmd, now), 0)
		batch[0].done <- proposed{applied, err}
		return
	}
	cmds := make([]fsm.Command, len(batch))
	for i, p := range batch {
		cmds[i] = fsm.Stamp(p.cmd, now)
	}
	cmd, err := fsm.NewBatch(now, cmds)
	if err != nil {
		for _, p := range batch {
			p.done <- proposed{err: err}
		}
		return
	}
	applied, err := b.n.apply(ctx, cmd, 0)
	res, ok := applied.Value.(fsm.BatchResult)
	if err == nil && (!ok || len(res.Results) != len(batch)) {
		err = fmt.Errorf("%w: batch of %d answered %T", ErrOutcomeUnknown, len(batch), applied.Value)
	}
	b.n.batches.observe(len(batch))
	for i, p := range batch {
		if err != nil {
			p.done <- proposed{err: err}
			continue
		}
		out := Applied{Index: applied.Index}
		if rerr, isErr := res.Results[i].(error); isErr {
			p.done <- proposed{applied: out, err: rerr}
			continue
		}
		out.Value = res.Results[i]
		p.done <- proposed{applied: out}
	}
}

func (p *proposal) fail(err error) {
	if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
		p.done <- proposed{err: err}
	}
}

// notLeader is the error for a proposal that found no leadership to join:
// ErrNotLeader when another node leads, else ErrNoLeader.
func (n *Node) notLeader() error {
	if leader, ok := n.Leader(); ok && leader.Machine != n.cfg.ID {
		return ErrNotLeader
	}
	return ErrNoLeader
}

// batchStats counts the batch entries this node proposed and the commands
// they carried: elanous_batches_total and elanous_batched_commands_total of
// the node's Collector.
type batchStats struct {
	mu       sync.Mutex
	batches  uint64
	commands uint64
}

func (s *batchStats) observe(size int) {
	s.mu.Lock()
	s.batches++
	s.commands += uint64(max(size, 0))
	s.mu.Unlock()
}

// read returns the batches and commands counted so far.
func (s *batchStats) read() (batches, commands uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches, s.commands
}
