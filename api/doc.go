// Package api is the HTTP API of an elanous-node candidate (echo).
//
// It owns the routes of the HTTP contract (ARCHITECTURE.md, "The HTTP
// contract"; docs/http-api.md), authentication (cluster tokens admin ⊇
// member ⊇ query, and machine tokens looked up by hash in the replicated
// state), strict JSON decoding with size limits, forwarding of writes from a
// follower to the leader, blocking queries and the read headers, one error
// handler that maps package errors to statuses, and Prometheus metrics.
//
// Routes are one table (routes.go): method, path, handler, scope, whether the
// route writes, and its time budget. A write passes the write middleware after
// authentication: a node that does not lead forwards the request as received
// (body bytes, credentials, and a header that stops a second hop) to the
// leader before its handler runs, so only the leader decodes, validates,
// draws lease ids and token secrets, and proposes through
// cluster.Node.Propose. With no leader a write waits a little for an election
// and then answers 503 no-leader with Retry-After, well inside the one second
// the TypeScript lease client allows. Writes and ?consistent=true reads share
// one retry-and-forward loop (onLeader).
//
// Read-your-writes: a write's answer carries X-Elanous-Index, the index of
// the entry that made the change. A node that forwarded a write answers only
// once its own state machine has applied that index (bounded by the route's
// budget), so the caller's next default read on that node sees the write.
//
// Handlers return wire types, converted from fsm records in convert.go:
// the JSON of an fsm record is the snapshot format, not the HTTP format.
//
// With Deps.TLS the API is HTTPS (TLS 1.3) with the node's certificate, read
// at each handshake so a reload reaches new connections, and the forwarding
// client verifies the leader against the cluster CA (presenting the node's
// certificate, which an API with verify_incoming_api requires). SetTokens
// swaps the cluster tokens atomically when tokens.json is reloaded.
//
// The operations routes (ops.go; ARCHITECTURE.md, "Operations") save and
// restore snapshot files, whose bodies stream through a follower to the
// leader rather than pass the 64 KiB write middleware, and transfer
// leadership; each writes an audit line where its handler runs.
package api
