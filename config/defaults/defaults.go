// Package defaults holds the defaults of the configuration keys that a
// package below config also falls back to when its caller leaves a field
// zero: raft.* (cluster.Config), ttl.* (cluster.Config and api/apitest) and
// limits.* (api.Deps.Limits).
// config.Default is built from them and is the only place they become a
// configuration; cluster and api, which may not import config
// (ARCHITECTURE.md, "Packages and their rooms"), take the same constants
// rather than a copy of the numbers. It imports nothing but the standard
// library.
package defaults

import "time"

// Raft timings (raft.*; hashicorp/raft's Config fields of the same names).
const (
	HeartbeatTimeout   = 500 * time.Millisecond // raft.heartbeat_timeout
	ElectionTimeout    = 500 * time.Millisecond // raft.election_timeout
	LeaderLeaseTimeout = 250 * time.Millisecond // raft.leader_lease_timeout
	CommitTimeout      = 50 * time.Millisecond  // raft.commit_timeout
	SnapshotThreshold  = 8192                   // raft.snapshot_threshold
	SnapshotInterval   = 5 * time.Second        // raft.snapshot_interval
	TrailingLogs       = 2048                   // raft.trailing_logs
	MaxAppendEntries   = 64                     // raft.max_append_entries
	// MaxBatch is the most commands of one group-commit entry
	// (raft.max_batch; ARCHITECTURE.md, "The write path"): a batch of 64
	// commands is about 20 KiB.
	MaxBatch = 64
)

// Grace is the failover grace a new leader's claim adds to every remaining
// TTL when raft.grace is 0: twice the election timeout (ARCHITECTURE.md,
// "Time model").
func Grace(electionTimeout time.Duration) time.Duration { return 2 * electionTimeout }

// Renewal slack (ttl.*; ARCHITECTURE.md, "Renewals").
const (
	RenewSlack    = 0.25            // ttl.renew_slack, a fraction of a record's TTL
	RenewSlackMax = 5 * time.Minute // ttl.renew_slack_max
)

// A node's own abuse limits (limits.*; ARCHITECTURE.md, "Abuse limits"): far
// above a fleet's needs (a seed member writes about once every 10 s and
// holds one blocking /v1/primary query per candidate; 10,000 of them stay
// under every cap).
const (
	WriteRate                 = 100              // limits.write_rate, writes per second
	WriteBurst                = 200              // limits.write_burst
	Connections               = 32768            // limits.connections
	ConnectionsPerAddress     = 256              // limits.connections_per_address
	BlockingQueries           = 16384            // limits.blocking_queries
	BlockingQueriesPerAddress = 64               // limits.blocking_queries_per_address
	AnonymousWait             = 30 * time.Second // limits.anonymous_wait
	ForwardConnections        = 64               // limits.forward_connections
)
