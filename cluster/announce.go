package cluster

import "sync"

// announcer coalesces AnnounceCommit calls: at most one barrier is in
// flight, and calls made meanwhile share one more after it.
type announcer struct {
	mu      sync.Mutex
	running bool // a barrier is in flight; guarded by mu
	again   bool // a call came while it was; guarded by mu
}

// AnnounceCommit makes the followers learn the leader's commit index now
// rather than at the next replication tick. Call it on the leader after a
// write whose follower waits to apply it (a forwarded write: the follower
// answers its client only once it has applied the entry).
//
// hashicorp/raft tells a follower that entries are committed only with the
// next AppendEntries: the next write's, or an empty one sent CommitTimeout to
// twice CommitTimeout after the last (50–100 ms with the default). When
// writes are sparse a forwarded write would wait that long. AnnounceCommit
// appends a barrier entry, which is replicated at once and carries the commit
// index; the state machine never sees it. At most one barrier is in flight,
// and the calls made meanwhile share one more after it, so under load it adds
// at most one entry per replication round trip. It returns at once; on a
// follower, or after Close, the barrier fails and nothing happens.
func (n *Node) AnnounceCommit() {
	a := &n.announce
	a.mu.Lock()
	if a.running {
		a.again = true
		a.mu.Unlock()
		return
	}
	a.running = true
	a.mu.Unlock()
	go func() {
		for {
			// The barrier is appended after every write committed before
			// this call, so its replication carries their commit.
			_ = n.raft.Barrier(n.cfg.HeartbeatTimeout).Error()
			a.mu.Lock()
			if !a.again {
				a.running = false
				a.mu.Unlock()
				return
			}
			a.again = false
			a.mu.Unlock()
		}
	}()
}
