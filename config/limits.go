package config

import (
	"math"
	"time"

	"github.com/spf13/viper"

	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/wire"
)

// LimitsConfig are this node's own abuse limits (limits.*): rate limits on
// writes and caps on connections and blocking queries. Each node enforces
// its own; they are not replicated. The cluster's quotas (resources and port
// leases per machine, resources in the cluster, remembered Idempotency-Keys)
// are not here: they live in the replicated state, so that every replica
// refuses the same commands, and an admin changes them through the log
// (PUT /v1/cluster/limits, `elanous-node limits set`).
//
// The defaults are far above what a fleet needs: a seed member writes about
// once every 10 s (a heartbeat of its machine and its instance and a renewal
// of each lease every 30 s) and holds one blocking /v1/primary query on each
// candidate.
type LimitsConfig struct {
	// WriteRate is the sustained rate, in writes per second, allowed to one
	// machine token on this node (limits.write_rate); 0 turns the rate
	// limits off. Requests that fail authentication (a missing, malformed or
	// unknown token) are limited at the same rate per remote address.
	// Writes with a valid token are never limited by address: a whole
	// fleet may sit behind one NAT address, and the harm one authenticated
	// caller can do is bounded by its machine token's bucket and the
	// replicated quotas.
	WriteRate float64 `mapstructure:"write_rate"`
	// WriteBurst is the size of each bucket: how many writes may come at
	// once after a quiet spell (limits.write_burst).
	WriteBurst int `mapstructure:"write_burst"`
	// Connections caps the HTTP connections this node holds open at once
	// (limits.connections); past it new connections wait in the kernel's
	// accept queue.
	Connections int `mapstructure:"connections"`
	// ConnectionsPerAddress caps the HTTP connections one remote address
	// holds open (limits.connections_per_address); a connection past it is
	// closed as soon as it is accepted.
	ConnectionsPerAddress int `mapstructure:"connections_per_address"`
	// BlockingQueries caps the blocking queries (?index=N&wait=D) waiting at
	// once on this node (limits.blocking_queries); past it they are 429.
	BlockingQueries int `mapstructure:"blocking_queries"`
	// BlockingQueriesPerAddress caps those of one remote address
	// (limits.blocking_queries_per_address).
	BlockingQueriesPerAddress int `mapstructure:"blocking_queries_per_address"`
	// AnonymousWait is the longest wait of a blocking /v1/primary query sent
	// without a valid token (limits.anonymous_wait); an authenticated one may
	// wait 5 minutes.
	AnonymousWait time.Duration `mapstructure:"anonymous_wait"`
	// ForwardConnections caps the connections this node opens to the leader
	// to forward writes (limits.forward_connections); past it forwards queue
	// for a connection within their time budget.
	ForwardConnections int `mapstructure:"forward_connections"`
}

// DefaultLimits returns the default limits.* values (config/defaults).
func DefaultLimits() LimitsConfig {
	return LimitsConfig{
		WriteRate:                 defaults.WriteRate,
		WriteBurst:                defaults.WriteBurst,
		Connections:               defaults.Connections,
		ConnectionsPerAddress:     defaults.ConnectionsPerAddress,
		BlockingQueries:           defaults.BlockingQueries,
		BlockingQueriesPerAddress: defaults.BlockingQueriesPerAddress,
		AnonymousWait:             defaults.AnonymousWait,
		ForwardConnections:        defaults.ForwardConnections,
	}
}

// Node returns the limits as the API enforces and reports them
// (api.Deps.Limits; the "node" of GET /v1/cluster/limits). It is the one
// conversion between the config keys and the wire fields: write_rate 0
// stays 0 (no rate limit), anonymous_wait becomes milliseconds.
func (l LimitsConfig) Node() wire.NodeLimits {
	return wire.NodeLimits{
		WriteRate:                 l.WriteRate,
		WriteBurst:                l.WriteBurst,
		Connections:               l.Connections,
		ConnectionsPerAddress:     l.ConnectionsPerAddress,
		BlockingQueries:           l.BlockingQueries,
		BlockingQueriesPerAddress: l.BlockingQueriesPerAddress,
		AnonymousWaitMs:           l.AnonymousWait.Milliseconds(),
		ForwardConnections:        l.ForwardConnections,
	}
}

// setLimitDefaults registers the defaults of limits.* and log.audit_file.
func setLimitDefaults(v *viper.Viper, d Config) {
	l := d.Limits
	v.SetDefault("limits.write_rate", l.WriteRate)
	v.SetDefault("limits.write_burst", l.WriteBurst)
	v.SetDefault("limits.connections", l.Connections)
	v.SetDefault("limits.connections_per_address", l.ConnectionsPerAddress)
	v.SetDefault("limits.blocking_queries", l.BlockingQueries)
	v.SetDefault("limits.blocking_queries_per_address", l.BlockingQueriesPerAddress)
	v.SetDefault("limits.anonymous_wait", l.AnonymousWait)
	v.SetDefault("limits.forward_connections", l.ForwardConnections)
	v.SetDefault("log.audit_file", d.Log.AuditFile)
}

func (c Config) validateLimits(p *problems) {
	l := c.Limits
	if l.WriteRate < 0 {
		p.add("limits.write_rate", "must not be negative (got %g); 0 turns the rate limits off", l.WriteRate)
	}
	if math.IsNaN(l.WriteRate) { // a limiter at NaN lets every write through
		p.add("limits.write_rate", "must be a number (got NaN); 0 turns the rate limits off")
	}
	if l.WriteRate > 0 && l.WriteBurst < 1 {
		p.add("limits.write_burst", "must be at least 1 (got %d)", l.WriteBurst)
	}
	atLeastOne := func(key string, n int) bool {
		if n < 1 {
			p.add(key, "must be at least 1 (got %d)", n)
			return false
		}
		return true
	}
	connOK := atLeastOne("limits.connections", l.Connections)
	perConnOK := atLeastOne("limits.connections_per_address", l.ConnectionsPerAddress)
	if connOK && perConnOK && l.ConnectionsPerAddress > l.Connections {
		p.add("limits.connections_per_address", "%d must not exceed limits.connections %d", l.ConnectionsPerAddress, l.Connections)
	}
	bqOK := atLeastOne("limits.blocking_queries", l.BlockingQueries)
	perBQOK := atLeastOne("limits.blocking_queries_per_address", l.BlockingQueriesPerAddress)
	if bqOK && perBQOK && l.BlockingQueriesPerAddress > l.BlockingQueries {
		p.add("limits.blocking_queries_per_address", "%d must not exceed limits.blocking_queries %d", l.BlockingQueriesPerAddress, l.BlockingQueries)
	}
	if l.AnonymousWait < time.Second || l.AnonymousWait > wire.MaxBlockingWait {
		p.add("limits.anonymous_wait", "must be between 1s and %s (got %s)", wire.MaxBlockingWait, l.AnonymousWait)
	}
	atLeastOne("limits.forward_connections", l.ForwardConnections)
}
