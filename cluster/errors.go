package cluster

import "errors"

// Errors returned by Propose and ReadIndex. Domain outcomes (not found,
// forbidden, …) come from package fsm unchanged.
var (
	// ErrNotLeader is returned when this node is not the leader but one is
	// known; the write was not applied and may be forwarded to Leader().
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader is returned when no leader is known; the write was not
	// applied. Retry after an election.
	ErrNoLeader = errors.New("no leader")
	// ErrNotReady is returned by a leader whose ClaimPrimary is not applied
	// yet; the write was not applied.
	ErrNotReady = errors.New("leader not ready: its claim is not applied yet")
	// ErrOutcomeUnknown is returned when a write was handed to Raft but its
	// outcome could not be learned (leadership lost, deadline passed): it may
	// or may not be applied.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("node closed")
)
