// Package cluster runs the Raft node of an elanous-node candidate.
//
// It owns the stores (raft-boltdb/v2 for the log and stable store, a file
// snapshot store under <data_dir>/raft), the choice of transport (plain TCP
// or mutual TLS, both in package cluster/transport), bootstrap from the candidate list, and leadership: a node that wins an
// election stamps every command with its cluster time, claims the primary
// (ClaimPrimary, which sets the generation and rebases every TTL) and accepts
// writes once that claim is applied; while it leads it proposes the Sweeps
// that expire records. The time model is ARCHITECTURE.md §3.
//
// Propose is the one write path. It merges raft's two error channels
// (future.Error and the FSM's response) and tells apart a write that surely
// did not happen (ErrNotLeader, ErrNoLeader, ErrNotReady) from one whose
// outcome is unknown (ErrOutcomeUnknown). ReadIndex makes a read linearizable.
//
// Membership: Candidates resolves the servers from the replicated candidate
// directory (the configuration before it exists); AddPeer, RemovePeer,
// PromotePeer and DemotePeer change them on the leader, whose maintenance
// loop seeds the directory, keeps it in step with Raft and promotes caught-up
// non-voters; Recover rewrites a stopped node's configuration after a lost
// quorum (ARCHITECTURE.md, "Membership").
//
// The operations (ops.go) are Backup (a copy after a ReadIndex), Restore (a
// backup rebased once on the leader and installed through raft.Restore) and
// TransferLeadershipTo (answered once the new leader's claim is applied).
//
// The files are grouped by room, the prefix of a file's name telling which:
//
//   - node.go, errors.go, format.go, metrics.go: the Node, its stores and
//     configuration, the errors it returns, the version of its formats, and
//     its metrics.
//   - membership*.go: candidates and the servers of the Raft configuration,
//     the replicated directory, the leader's maintenance (ARCHITECTURE.md §9).
//   - write_*.go and renew.go: the write path, from the precheck through the
//     batcher and Propose to AnnounceCommit; renewals (ARCHITECTURE.md §2, §3).
//   - leader*.go and fences.go: leadership and time, the lease clock, fast
//     failover's election, the fences read from it (ARCHITECTURE.md §3, §11).
//   - ops*.go: backup, restore, leadership transfer, recovery after a lost
//     quorum, shutdown and status (ARCHITECTURE.md §10).
//
// The Raft network layer is package cluster/transport.
package cluster
