// Package api is the HTTP API of an elanous-node candidate (echo).
//
// It owns the routes of DESIGN §5, authentication (cluster tokens admin ⊇
// member ⊇ query, and machine tokens looked up by hash in the replicated
// state), strict JSON decoding with size limits, forwarding of writes from a
// follower to the leader, blocking queries and the read headers, one error
// handler that maps package errors to statuses, and Prometheus metrics.
//
// Writes go through cluster.Node.Propose. A follower that gets ErrNotLeader
// forwards the request, body and credentials unchanged, to the leader's URL
// with a header that stops a second hop. With no leader a write waits a little
// for an election and then answers 503 no-leader with Retry-After, well inside
// the one second the TypeScript lease client allows.
package api
