package cluster

import (
	"sync"
	"time"
)

// announceDelay is how long AnnounceCommit waits for a later entry to carry
// the commit index before it appends a barrier to do it.
const announceDelay = time.Millisecond

// announcer coalesces AnnounceCommit calls: one goroutine at a time, which
// serves every call made while it runs.
type announcer struct {
	mu      sync.Mutex
	running bool   // a goroutine is serving calls; guarded by mu
	pending bool   // a call came that it has not served; guarded by mu
	last    uint64 // the highest last log index seen by a call; guarded by mu
	sent    uint64 // barriers appended; guarded by mu
}

// Announcements returns how many barriers AnnounceCommit appended.
func (n *Node) Announcements() uint64 {
	n.announce.mu.Lock()
	defer n.announce.mu.Unlock()
	return n.announce.sent
}

// AnnounceCommit makes the followers learn the leader's commit index now
// rather than at the next replication tick. Call it on the leader after a
// write whose follower waits to apply it (a forwarded write: the follower
// answers its client only once it has applied the entry).
//
// hashicorp/raft tells a follower that entries are committed only with the
// next AppendEntries: the next write's, or an empty one sent CommitTimeout to
// twice CommitTimeout after the last (50–100 ms with the default). Under load
// the next write comes at once and carries the commit; when writes are
// sparse a forwarded write would wait for the tick. So AnnounceCommit waits
// announceDelay and, if no entry was appended since the call (an entry
// appended after the write committed carries its commit to every follower),
// appends a barrier entry, which is replicated at once; the state machine
// never sees it. Calls made meanwhile are served by the same goroutine, so it
// adds at most one entry per delay, and none while writes flow. It returns at
// once; on a follower, or after Close, the barrier fails and nothing happens.
func (n *Node) AnnounceCommit() {
	a := &n.announce
	last := n.raft.LastIndex()
	a.mu.Lock()
	a.last = max(a.last, last)
	a.pending = true
	if a.running {
		a.mu.Unlock()
		return
	}
	a.running = true
	a.mu.Unlock()
	go func() {
		timer := time.NewTimer(announceDelay)
		defer timer.Stop()
		for {
			<-timer.C
			a.mu.Lock()
			seen := a.last
			a.pending = false
			a.mu.Unlock()
			if n.raft.LastIndex() <= seen {
				// The barrier is appended after every write committed
				// before the calls, so its replication carries their commit.
				_ = n.raft.Barrier(n.cfg.HeartbeatTimeout).Error()
				a.mu.Lock()
				a.sent++
				a.mu.Unlock()
			}
			a.mu.Lock()
			if !a.pending {
				a.running = false
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
			timer.Reset(announceDelay)
		}
	}()
}
