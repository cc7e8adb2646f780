package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/elanous/elanous-node/fsm"
)

// leadership is the state of one term this node leads.
type leadership struct {
	term      uint64
	wallAtWin int64     // Unix ms read from the wall clock once, at the win
	monoStart time.Time // monotonic reference taken with wallAtWin
	ready     chan struct{}
	cancel    context.CancelFunc
	batcher   *batcher // nil when batching is off
}

// now is the lease clock: wallAtWin plus monotonic elapsed time.
func (l *leadership) now() int64 { return l.wallAtWin + time.Since(l.monoStart).Milliseconds() }

func (l *leadership) isReady() bool {
	select {
	case <-l.ready:
		return true
	default:
		return false
	}
}

// watchLeadership follows raft's leadership notifications: on a win it starts
// the claim and sweep loop for the term, on a loss it cancels it.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			n.stepDown()
			return
		case isLeader := <-n.notifyCh:
			n.mu.Lock()
			n.observed++
			n.mu.Unlock()
			if isLeader {
				n.stepDown()
				n.takeLead()
			} else {
				n.stepDown()
			}
		}
	}
}

func (n *Node) takeLead() {
	wall := n.cfg.WallClock()
	ctx, cancel := context.WithCancel(context.Background())
	l := &leadership{
		term:      n.raft.CurrentTerm(),
		wallAtWin: wall.UnixMilli(),
		monoStart: time.Now(),
		ready:     make(chan struct{}),
		cancel:    cancel,
	}
	if n.cfg.MaxBatch > 1 {
		l.batcher = newBatcher(n, l)
	}
	n.mu.Lock()
	n.lead = l
	n.elected++
	n.mu.Unlock()
	n.log.Info("won election", "term", l.term, "wall_ms", l.wallAtWin)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.leadTerm(ctx, l)
	}()
	if l.batcher != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			l.batcher.run(ctx)
		}()
	}
}

func (n *Node) stepDown() {
	n.mu.Lock()
	l := n.lead
	n.lead = nil
	n.mu.Unlock()
	if l != nil {
		l.cancel()
		n.log.Info("leadership ended", "term", l.term)
	}
}

// leadTerm runs one term of leadership: Barrier, ClaimPrimary, then sweeps.
// A failed barrier or claim is retried while this node still leads.
func (n *Node) leadTerm(ctx context.Context, l *leadership) {
	for attempt := 0; ; attempt++ {
		p, err := n.claim(ctx, l)
		if err == nil {
			close(l.ready)
			n.log.Info("claimed primary", "generation", p.Generation, "index", p.Index, "now_ms", p.ClaimedAt)
			break
		}
		n.log.Warn("claim primary failed", "term", l.term, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.HeartbeatTimeout):
		}
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.raiseFormat(ctx, l)
	}()
	go func() {
		defer n.wg.Done()
		n.maintainMembers(ctx, l)
	}()
	n.sweepLoop(ctx, l)
}

func (n *Node) claim(ctx context.Context, l *leadership) (fsm.Primary, error) {
	barrier := n.raft.Barrier(n.cfg.ClaimTimeout)
	done := make(chan error, 1)
	go func() { done <- barrier.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fsm.Primary{}, fmt.Errorf("barrier: %w", err)
		}
	case <-ctx.Done():
		return fsm.Primary{}, fmt.Errorf("barrier: %w", ctx.Err())
	}
	claim := fsm.ClaimPrimary{Header: fsm.Header{Now: l.now()}, Holder: n.cfg.ID, GraceMs: n.cfg.Grace.Milliseconds()}
	res, err := n.apply(ctx, claim, n.cfg.ClaimTimeout)
	if err != nil {
		return fsm.Primary{}, err
	}
	p, _ := res.Value.(fsm.Primary)
	return p, nil
}

// sweepLoop proposes a Sweep at each due expiry and at least every
// SweepInterval while any TTL is live. A change to the resources or leases
// table recomputes the next due time.
func (n *Node) sweepLoop(ctx context.Context, l *leadership) {
	for {
		_, resCh := n.fsm.Watch(fsm.TableResources)
		_, leaseCh := n.fsm.Watch(fsm.TableLeases)
		var wait <-chan time.Time
		var timer *time.Timer
		if next, ok := n.fsm.NextExpiry(); ok {
			d := time.Duration(next-l.now()+1) * time.Millisecond
			timer = time.NewTimer(max(0, min(d, n.cfg.SweepInterval)))
			wait = timer.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-resCh:
		case <-leaseCh:
		case <-wait:
			fired = true
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue
		}
		if _, err := n.apply(ctx, fsm.Sweep{Header: fsm.Header{Now: l.now()}}, n.cfg.ClaimTimeout); err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("sweep failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(n.cfg.HeartbeatTimeout):
			}
		}
	}
}
