package config

import (
	"math"
	"time"

	"github.com/spf13/viper"

	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/wire"
)

// DefaultLimits returns the default limits.* values (config/defaults). The
// limits themselves are declared once, as wire.NodeLimits: Config.Limits
// decodes the keys into it and the API enforces and reports it as it is.
func DefaultLimits() wire.NodeLimits {
	return wire.NodeLimits{
		WriteRate:                 defaults.WriteRate,
		WriteBurst:                defaults.WriteBurst,
		Connections:               defaults.Connections,
		ConnectionsPerAddress:     defaults.ConnectionsPerAddress,
		BlockingQueries:           defaults.BlockingQueries,
		BlockingQueriesPerAddress: defaults.BlockingQueriesPerAddress,
		AnonymousWaitMs:           wire.MillisOf(defaults.AnonymousWait),
		ForwardConnections:        defaults.ForwardConnections,
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
	v.SetDefault("limits.anonymous_wait", l.AnonymousWaitMs.Duration())
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
	if wait := l.AnonymousWaitMs.Duration(); wait < time.Second || wait > wire.MaxBlockingWait {
		p.add("limits.anonymous_wait", "must be between 1s and %s (got %s)", wire.MaxBlockingWait, wait)
	}
	atLeastOne("limits.forward_connections", l.ForwardConnections)
}
