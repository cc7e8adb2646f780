// Package member is the Go client that fleet machines ("members") run against
// an elanous-node cluster. It is a port of the TypeScript control-plane client
// of elanous 0.2.4 (member.ts, port-lease-heartbeat.ts, primary.ts) and keeps
// its wire protocol, constants and decisions:
//
//   - Resolver finds the primary: every candidate's GET /v1/primary is asked
//     concurrently, the highest generation whose holder is a configured
//     candidate wins, and the first candidate is the fallback. It also applies
//     the token precedence rules, so a token is only ever sent to an address it
//     was configured or joined for, or that the cluster listed in answer to
//     that token (Learn).
//   - Client speaks every endpoint of the HTTP API and returns the wire
//     types; a non-2xx answer is an *APIError, an unreachable server wraps
//     ErrUnreachable.
//   - StartHeartbeat registers a machine and one instance and keeps them alive
//     (heartbeat 30 s, instance refresh 300 s, re-register at once after 404,
//     exponential backoff up to 300 s).
//   - StartPortLease keeps a port lease renewed (30 s, retry 5 s, deadline =
//     last success + TTL - margin) and releases it when stopped.
//   - ReadJoinFile and WriteJoinFile handle control/join.json (mode 0600,
//     written atomically, never widening scopes).
//   - WatchPrimary follows the primary claim with blocking queries.
//   - FollowCandidates keeps the candidate list in step with the cluster's
//     (GET /v1/cluster/peers) and the join file's "candidates" with it;
//     Resolver.Learn decides what a listed candidate is trusted with.
//
// Beyond the TypeScript client, the heartbeat and the lease keeper re-resolve
// the primary and retry once at once after a network error or a 503, so a
// leader failover costs one retry rather than a backoff period.
//
// Timers use the runtime's clock (test them with testing/synctest); the
// wall-clock stamps the loops compute with come from an injectable Clock.
//
// The package imports only wire and the standard library.
package member
