// Package fsm is the replicated state machine of elanous-node: resources,
// port leases, member-token hashes and the primary claim.
//
// It is pure and deterministic. Apply never reads a clock, random source,
// environment, file or network: every command carries the time (`now`, Unix
// milliseconds) stamped by the leader, and generation and fences come from the
// raft.Log's Term and Index, which every replica sees identically. Iteration
// over maps never decides state: where order matters, keys are sorted.
//
// A log entry is one type byte followed by a JSON body (see Encode). Type
// numbers are append-only; bit 0x80 marks a type older versions may skip.
// An unknown type without that bit panics: version skew must crash a replica,
// never let it diverge. A known type whose body does not decode is a no-op
// that returns ErrInvalidCommand.
//
// Every type is registered once, in the command table (table.go), which
// Decode, Encode, Stamp and Apply all go through. A released type's meaning
// never changes and the snapshot carries a format version; the rules, and the
// fixtures in testdata/format that hold every release to them, are in
// ARCHITECTURE.md, "Versioned formats".
//
// Domain outcomes (not found, forbidden, lease mismatch, band exhausted) are
// Apply's return value as errors defined in errors.go; package cluster hands
// them back to the proposer.
package fsm
