package transport

import "github.com/hashicorp/raft"

// mainThreadHeartbeats is a NetworkTransport whose heartbeats go through the
// raft main goroutine like every other RPC.
//
// hashicorp/raft (v1.7.3 and v1.8.0) handles heartbeats on a fast path, on the
// transport's connection goroutine, and a heartbeat carrying a newer term
// bumps currentTerm and demotes the node without synchronising with the
// leader loop. A deposed leader that is dispatching a batch at that instant
// stamps its own entries with the NEW term; two different entries then share
// an (index, term) pair, Raft's log-matching check cannot see the difference
// and the replicas' state machines diverge for good (hashicorp/raft#695).
// Refusing the fast-path registration makes raft queue heartbeats on its RPC
// channel, where the term change is serialised with dispatchLogs. The price
// is that a follower busy with a disk write answers a heartbeat after it, not
// before.
type mainThreadHeartbeats struct {
	netTransport
}

// netTransport is what raft uses of a network transport: the RPCs, pre-vote
// and Close.
type netTransport interface {
	raft.Transport
	raft.WithPreVote
	raft.WithClose
}

// SetHeartbeatHandler ignores the fast-path handler raft offers.
func (mainThreadHeartbeats) SetHeartbeatHandler(func(raft.RPC)) {}

// Safe wraps the transports whose heartbeat fast path is unsafe:
// raft's NetworkTransport and the TLS transport built on it.
func Safe(t raft.Transport) raft.Transport {
	switch nt := t.(type) {
	case *raft.NetworkTransport:
		return mainThreadHeartbeats{nt}
	case *TLS:
		return mainThreadHeartbeats{nt}
	}
	return t
}
