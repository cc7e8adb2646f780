// Package cluster runs the Raft node of an elanous-node candidate.
//
// It owns the stores (raft-boltdb/v2 for the log and stable store, a file
// snapshot store under <data_dir>/raft), the transport — plain TCP, or mutual
// TLS (tls_transport.go) where both ends present a certificate of the cluster
// CA naming a candidate and every RPC must come from the machine its
// connection's certificate names — bootstrap from the candidate list, and leadership: on winning an election the node reads the
// wall clock once, then stamps every command with wallAtWin + monotonic
// elapsed time (the lease clock), so a wall-clock jump on the leader does not
// move cluster time. Its first command after a Barrier is ClaimPrimary, which
// sets the generation to the election's term and rebases every TTL. Only after
// that claim is applied does the node accept writes. While it leads it
// proposes a Sweep at each due expiry and at least every SweepInterval.
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
package cluster
