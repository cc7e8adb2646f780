package api

import (
	"time"

	"github.com/elanous/elanous-node/wire"
	"golang.org/x/time/rate"
)

// Caps are one node's own abuse limits (config limits.*; ARCHITECTURE.md,
// "Abuse limits"). A zero field takes its DefaultCaps value. They are not
// replicated: the quotas every replica must agree on live in the state
// machine (fsm.Limits).
type Caps struct {
	// WriteRate is the sustained writes per second one machine token and one
	// remote address may make through this node; rate.Inf turns the rate
	// limits off. A request that fails authentication takes from its
	// address's bucket as a write does.
	WriteRate rate.Limit
	// WriteBurst is each bucket's size.
	WriteBurst int
	// Connections caps the open HTTP connections; past it new ones wait in
	// the kernel's accept queue.
	Connections int
	// ConnectionsPerAddress caps one remote address's open connections; one
	// past it is closed as soon as it is accepted.
	ConnectionsPerAddress int
	// BlockingQueries caps the blocking queries waiting at once; past it
	// they are answered 429 rate-limited.
	BlockingQueries int
	// BlockingQueriesPerAddress caps one remote address's.
	BlockingQueriesPerAddress int
	// AnonymousWait caps the wait of a /v1/primary blocking query without a
	// valid token (an authenticated one may wait MaxWait).
	AnonymousWait time.Duration
	// ForwardConnections caps the connections of the default forwarding
	// client to the leader (http.Transport.MaxConnsPerHost).
	ForwardConnections int
}

// DefaultCaps are the defaults of config limits.*: far above a fleet's
// needs (a seed member writes about once every 10 s and holds one blocking
// /v1/primary query per candidate; 10,000 of them stay under every cap).
func DefaultCaps() Caps {
	return Caps{
		WriteRate: 100, WriteBurst: 200,
		Connections: 32768, ConnectionsPerAddress: 256,
		BlockingQueries: 16384, BlockingQueriesPerAddress: 64,
		AnonymousWait: 30 * time.Second, ForwardConnections: 64,
	}
}

func (c Caps) withDefaults() Caps {
	d := DefaultCaps()
	if c.WriteRate == 0 {
		c.WriteRate = d.WriteRate
	}
	if c.WriteBurst == 0 {
		c.WriteBurst = d.WriteBurst
	}
	if c.Connections == 0 {
		c.Connections = d.Connections
	}
	if c.ConnectionsPerAddress == 0 {
		c.ConnectionsPerAddress = min(d.ConnectionsPerAddress, c.Connections)
	}
	if c.BlockingQueries == 0 {
		c.BlockingQueries = d.BlockingQueries
	}
	if c.BlockingQueriesPerAddress == 0 {
		c.BlockingQueriesPerAddress = min(d.BlockingQueriesPerAddress, c.BlockingQueries)
	}
	if c.AnonymousWait == 0 {
		c.AnonymousWait = d.AnonymousWait
	}
	if c.ForwardConnections == 0 {
		c.ForwardConnections = d.ForwardConnections
	}
	return c
}

// wire returns the caps as GET /v1/cluster/limits shows them.
func (c Caps) wire() *wire.NodeLimits {
	r := float64(c.WriteRate)
	if c.WriteRate == rate.Inf {
		r = 0
	}
	return &wire.NodeLimits{
		WriteRate: r, WriteBurst: c.WriteBurst, Connections: c.Connections, ConnectionsPerAddress: c.ConnectionsPerAddress,
		BlockingQueries: c.BlockingQueries, BlockingQueriesPerAddress: c.BlockingQueriesPerAddress,
		AnonymousWaitMs: c.AnonymousWait.Milliseconds(), ForwardConnections: c.ForwardConnections,
	}
}
