package api

import (
	"time"

	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/wire"
	"golang.org/x/time/rate"
)

// withDefaults returns a node's own abuse limits (Deps.Limits, config
// limits.*; ARCHITECTURE.md, "Abuse limits") with every zero cap set to its
// config default (config/defaults). WriteRate 0 stays 0, which turns the rate
// limits off, as limits.write_rate 0 does and as GET /v1/cluster/limits
// reports it. A per-address cap left zero is at most its overall cap.
func withDefaults(l wire.NodeLimits) wire.NodeLimits {
	if l.WriteBurst == 0 {
		l.WriteBurst = defaults.WriteBurst
	}
	if l.Connections == 0 {
		l.Connections = defaults.Connections
	}
	if l.ConnectionsPerAddress == 0 {
		l.ConnectionsPerAddress = min(defaults.ConnectionsPerAddress, l.Connections)
	}
	if l.BlockingQueries == 0 {
		l.BlockingQueries = defaults.BlockingQueries
	}
	if l.BlockingQueriesPerAddress == 0 {
		l.BlockingQueriesPerAddress = min(defaults.BlockingQueriesPerAddress, l.BlockingQueries)
	}
	if l.AnonymousWaitMs == 0 {
		l.AnonymousWaitMs = wire.MillisOf(defaults.AnonymousWait)
	}
	if l.ForwardConnections == 0 {
		l.ForwardConnections = defaults.ForwardConnections
	}
	return l
}

// writeLimit is the rate of each write bucket: rate.Inf (no limit) for
// WriteRate 0.
func writeLimit(l wire.NodeLimits) rate.Limit {
	if l.WriteRate == 0 {
		return rate.Inf
	}
	return rate.Limit(l.WriteRate)
}

// anonymousWait caps the wait of a /v1/primary blocking query without a
// valid token (an authenticated one may wait wire.MaxBlockingWait).
func anonymousWait(l wire.NodeLimits) time.Duration {
	return l.AnonymousWaitMs.Duration()
}
