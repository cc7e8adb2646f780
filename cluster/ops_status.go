package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

func (n *Node) logStore() raft.LogStore {
	if n.stores == nil {
		return nil
	}
	return n.stores.Logs
}

// IsLeader reports whether this node leads (claim applied or not).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Ready reports whether this node can serve: on the leader once its own claim
// is applied; on a follower once a leader is known and that leader's claim
// (generation = current term) is applied here.
func (n *Node) Ready() bool {
	if _, err := n.readyLeadership(); err == nil {
		return true
	}
	leader, ok := n.Leader()
	if !ok || n.IsLeader() {
		return false
	}
	p := n.fsm.Primary()
	return p.Holder == leader.Machine && p.Generation == n.raft.CurrentTerm()
}

// PrimaryKnown reports whether this node can vouch for the primary claim it
// holds: it leads and its own claim for the current term is applied (the
// same apply that wakes /v1/primary watchers), or it follows a leader it
// heard from within the heartbeat timeout and has applied that leader's claim.
func (n *Node) PrimaryKnown() bool {
	if n.IsLeader() {
		p := n.fsm.Primary()
		return p.Holder == n.cfg.ID && p.Generation == n.raft.CurrentTerm()
	}
	if !n.Ready() {
		return false
	}
	last := n.raft.LastContact()
	return !last.IsZero() && time.Since(last) <= n.cfg.HeartbeatTimeout
}

// LastContact returns the time since this node last heard from a leader:
// 0 on the leader, -1 if it never did.
func (n *Node) LastContact() time.Duration {
	if n.IsLeader() {
		return 0
	}
	last := n.raft.LastContact()
	if last.IsZero() {
		return -1
	}
	return time.Since(last)
}

// LastLog returns the term and index of this node's last log entry, or of
// its latest snapshot when that is further: what raft's vote check compares
// (raft's getLastEntry). raft tells the last entry's term only in Stats.
func (n *Node) LastLog() (term, index uint64) {
	st := n.raft.Stats()
	u := func(k string) uint64 {
		v, _ := strconv.ParseUint(st[k], 10, 64)
		return v
	}
	li, si := u("last_log_index"), u("last_snapshot_index")
	if li < si {
		return u("last_snapshot_term"), si
	}
	return u("last_log_term"), li
}

// Server is one entry of the Raft configuration.
type Server struct {
	ID       string
	Address  string
	Suffrage string
}

// Status is this node's view of the cluster.
type Status struct {
	ID            string
	State         string
	Term          uint64
	Leader        string
	CommitIndex   uint64
	AppliedIndex  uint64
	LastIndex     uint64
	LastContact   time.Duration // -1 never, 0 on the leader
	Voter         bool
	Ready         bool
	Configuration []Server
	Primary       fsm.Primary
	Counts        fsm.Counts
	StateHash     string
	ElectionsWon  uint64
	LeaderChanges uint64
	Stats         map[string]string
}

// Status reports this node's raft view and the replicated configuration.
func (n *Node) Status(ctx context.Context) Status {
	st := Status{
		ID:           n.cfg.ID,
		State:        n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.fsm.AppliedIndex(),
		LastIndex:    n.raft.LastIndex(),
		LastContact:  n.LastContact(),
		Ready:        n.Ready(),
		Primary:      n.fsm.Primary(),
		Counts:       n.fsm.Counts(),
		Stats:        n.raft.Stats(),
	}
	st.AppliedIndex, st.StateHash = n.fsm.AppliedHash()
	if l, ok := n.Leader(); ok {
		st.Leader = l.Machine
	}
	n.mu.Lock()
	st.ElectionsWon, st.LeaderChanges = n.elected, n.observed
	n.mu.Unlock()
	future := n.raft.GetConfiguration()
	if future.Error() == nil {
		for _, s := range future.Configuration().Servers {
			st.Configuration = append(st.Configuration, Server{ID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String()})
			if string(s.ID) == n.cfg.ID && s.Suffrage == raft.Voter {
				st.Voter = true
			}
		}
	}
	return st
}

// LeaderChanges returns how many leadership changes this node observed and
// how many elections it won.
func (n *Node) LeaderChanges() (observed, won uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.observed, n.elected
}
