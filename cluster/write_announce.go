package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// announceDelay is how long the barrier fallback waits for a later entry to
// carry the commit index before it appends a barrier to do it.
const announceDelay = time.Millisecond

// announcer serves AnnounceCommit calls: one goroutine per follower at a
// time, which serves every call made for that follower while it runs.
type announcer struct {
	mu      sync.Mutex
	targets map[string]*announceTarget // by machine; guarded by mu
	direct  uint64                     // commit announcements sent; guarded by mu
	barrier barrierAnnouncer
}

// announceTarget is one follower's announcement state; guarded by
// announcer.mu.
type announceTarget struct {
	coalesced
	told uint64 // the highest commit index this follower accepted from us
	term uint64 // the term told was sent in
}

// coalesced is the state of a job served by one goroutine at a time, which
// serves every call made while it runs; its owner's lock guards it.
type coalesced struct {
	running bool // a goroutine is serving calls
	pending bool // a call came that it has not served
}

// call records a call and reports whether the caller must start the
// goroutine (none is running).
func (c *coalesced) call() (start bool) {
	c.pending = true
	if c.running {
		return false
	}
	c.running = true
	return true
}

// next is the goroutine's check before each round: false (and the goroutine
// ends) when no call is pending; true takes the pending calls.
func (c *coalesced) next() bool {
	if !c.pending {
		c.running = false
		return false
	}
	c.pending = false
	return true
}

// barrierAnnouncer coalesces the barrier fallback: one goroutine at a time,
// which serves every call made while it runs.
type barrierAnnouncer struct {
	mu        sync.Mutex
	coalesced        // guarded by mu
	last      uint64 // the highest last log index seen by a call; guarded by mu
	sent      uint64 // barriers appended; guarded by mu
}

// counts returns the commit announcements made so far: told to a follower
// directly (and accepted), and barriers appended as the fallback
// (elanous_commit_announcements_total of the node's Collector).
func (a *announcer) counts() (direct, barriers uint64) {
	a.mu.Lock()
	direct = a.direct
	a.mu.Unlock()
	a.barrier.mu.Lock()
	defer a.barrier.mu.Unlock()
	return direct, a.barrier.sent
}

// AnnounceCommit makes follower to (every follower when to is empty or not a
// known server) learn the leader's commit index now rather than at the next
// replication. Call it on the leader after a write whose follower waits to
// apply it (a forwarded write: the follower answers its client only once it
// has applied the entry), naming the follower that forwarded it.
//
// It sends the follower the empty AppendEntries raft sends on its commit
// timer (previous entry = the commit index with its term, commit index = it),
// which the follower checks as raft always does; no log entry is written.
// When the follower refuses or cannot be reached it falls back to a barrier
// entry, unless another entry is appended within announceDelay. At most one
// announcement is in flight per follower; later calls ride on the next one.
// It returns at once; on a follower, or after Close, nothing happens. Why and
// how: ARCHITECTURE.md §2, step 6 (read-your-writes).
func (n *Node) AnnounceCommit(to string) {
	targets := []string{to}
	if _, ok := n.Candidate(to); !ok || to == n.cfg.ID {
		targets = targets[:0]
		for _, s := range n.raftServers() {
			if id := string(s.ID); id != n.cfg.ID {
				targets = append(targets, id)
			}
		}
	}
	a := &n.announce
	for _, id := range targets {
		a.mu.Lock()
		if a.targets == nil {
			a.targets = map[string]*announceTarget{}
		}
		t := a.targets[id]
		if t == nil {
			t = &announceTarget{}
			a.targets[id] = t
		}
		start := t.call()
		a.mu.Unlock()
		if start {
			go n.announceLoop(id, t)
		}
	}
}

// announceLoop tells follower id the commit index until no call is pending.
func (n *Node) announceLoop(id string, t *announceTarget) {
	a := &n.announce
	for {
		a.mu.Lock()
		if !t.next() {
			a.mu.Unlock()
			return
		}
		told, toldTerm := t.told, t.term
		a.mu.Unlock()
		index, term, ok := n.tellCommit(id, told, toldTerm)
		if !ok {
			n.announceBarrier()
			continue
		}
		a.mu.Lock()
		if index > t.told || term != t.term {
			t.told, t.term = index, term
		}
		a.mu.Unlock()
	}
}

// tellCommit sends follower id the leader's commit index (see
// AnnounceCommit) unless it was told that index already in this term. It
// reports the index and term told, and false when the follower was not told
// (this node does not lead, the follower is unknown, unreachable or refused).
func (n *Node) tellCommit(id string, told, toldTerm uint64) (uint64, uint64, bool) {
	n.mu.Lock()
	l, closed := n.lead, n.closed
	n.mu.Unlock()
	if l == nil || closed {
		return told, toldTerm, true // not leading: nothing to announce
	}
	commit := n.raft.CommitIndex()
	if toldTerm == l.term && commit <= told {
		return told, toldTerm, true
	}
	store := n.logStore()
	peer, ok := n.Candidate(id)
	if store == nil || !ok || peer.Raft == "" || commit == 0 {
		return 0, 0, false
	}
	var entry raft.Log
	if err := store.GetLog(commit, &entry); err != nil {
		return 0, 0, false
	}
	self := n.trans.EncodePeer(raft.ServerID(n.cfg.ID), n.trans.LocalAddr())
	req := raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.cfg.ID), Addr: self},
		Term:      l.term,
		// The previous entry is the commit index itself: a follower that
		// holds it (same index, same term) holds the leader's log up to it.
		PrevLogEntry:      commit,
		PrevLogTerm:       entry.Term,
		LeaderCommitIndex: commit,
	}
	var resp raft.AppendEntriesResponse
	if err := n.trans.AppendEntries(raft.ServerID(id), raft.ServerAddress(peer.Raft), &req, &resp); err != nil || !resp.Success {
		return 0, 0, false
	}
	n.announce.mu.Lock()
	n.announce.direct++
	n.announce.mu.Unlock()
	return commit, l.term, true
}

// announceBarrier is the fallback of AnnounceCommit: it waits announceDelay
// and, if no entry was appended since the call (an entry appended after the
// write committed carries its commit to every follower), appends a barrier
// entry, which is replicated at once; the state machine never sees it. Calls
// made meanwhile are served by the same goroutine, so it adds at most one
// entry per delay, and none while writes flow. A barrier the raft loop is too
// busy to take (raft.ErrEnqueueTimeout) is tried again after the delay.
func (n *Node) announceBarrier() {
	b := &n.announce.barrier
	last := n.raft.LastIndex()
	b.mu.Lock()
	b.last = max(b.last, last)
	start := b.call()
	b.mu.Unlock()
	if !start {
		return
	}
	go func() {
		timer := time.NewTimer(announceDelay)
		defer timer.Stop()
		for {
			<-timer.C
			b.mu.Lock()
			seen := b.last
			b.pending = false // served by this round
			b.mu.Unlock()
			if n.raft.LastIndex() <= seen {
				// The barrier is appended after every write committed
				// before the calls, so its replication carries their commit.
				err := n.raft.Barrier(n.cfg.HeartbeatTimeout).Error()
				b.mu.Lock()
				switch {
				case err == nil:
					b.sent++
				case errors.Is(err, raft.ErrEnqueueTimeout):
					// The raft loop was too busy to take it: the calls
					// are still unserved, so try again after the delay.
					b.pending = true
				}
				b.mu.Unlock()
			}
			b.mu.Lock()
			more := b.next()
			b.mu.Unlock()
			if !more {
				return
			}
			timer.Reset(announceDelay)
		}
	}()
}
