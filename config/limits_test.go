package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

func TestDefaultLimits(t *testing.T) {
	d := Default()
	want := LimitsConfig{
		WriteRate: 100, WriteBurst: 200, Connections: 32768, ConnectionsPerAddress: 256,
		BlockingQueries: 16384, BlockingQueriesPerAddress: 64, AnonymousWait: 30 * time.Second, ForwardConnections: 64,
	}
	if d.Limits != want {
		t.Errorf("Default().Limits = %+v, want %+v", d.Limits, want)
	}
	if d.Log.AuditFile != "" {
		t.Errorf("Default().Log.AuditFile = %q, want empty (the main log)", d.Log.AuditFile)
	}
	if err := validConfig().Validate(); err != nil {
		t.Errorf("Validate() of the defaults = %v", err)
	}
}

// Node converts every limits.* key to its wire field: the API enforces and
// reports what it returns.
func TestLimitsConfig_Node(t *testing.T) {
	l := LimitsConfig{
		WriteRate: 2.5, WriteBurst: 5, Connections: 100, ConnectionsPerAddress: 20,
		BlockingQueries: 30, BlockingQueriesPerAddress: 8, AnonymousWait: 1500 * time.Millisecond, ForwardConnections: 7,
	}
	want := wire.NodeLimits{
		WriteRate: 2.5, WriteBurst: 5, Connections: 100, ConnectionsPerAddress: 20,
		BlockingQueries: 30, BlockingQueriesPerAddress: 8, AnonymousWaitMs: 1500, ForwardConnections: 7,
	}
	if got := l.Node(); got != want {
		t.Errorf("Node() = %+v, want %+v", got, want)
	}
	off := DefaultLimits()
	off.WriteRate = 0
	if got := off.Node(); got.WriteRate != 0 || got.AnonymousWaitMs != 30_000 || got.WriteBurst != 200 {
		t.Errorf("Node() of the defaults with write_rate 0 = %+v, want writeRate 0, anonymousWaitMs 30000, writeBurst 200", got)
	}
}

func TestLoad_Limits(t *testing.T) {
	file := writeFile(t, `
limits: { write_rate: 2.5, write_burst: 5, connections: 100, blocking_queries_per_address: 8 }
log: { audit_file: /var/log/elanous/audit.jsonl }
`)
	env := []string{"ELANOUS_LIMITS_ANONYMOUS_WAIT=10s", "ELANOUS_LIMITS_CONNECTIONS_PER_ADDRESS=20", "ELANOUS_LIMITS_WRITE_RATE=0.5"}
	c, err := Load(LoadOptions{File: file, Env: env})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := DefaultLimits()
	want.WriteRate, want.WriteBurst, want.Connections, want.BlockingQueriesPerAddress = 0.5, 5, 100, 8
	want.AnonymousWait, want.ConnectionsPerAddress = 10*time.Second, 20
	if !reflect.DeepEqual(c.Limits, want) {
		t.Errorf("Load() limits = %+v, want %+v", c.Limits, want)
	}
	if c.Log.AuditFile != "/var/log/elanous/audit.jsonl" {
		t.Errorf("Load() log.audit_file = %q", c.Log.AuditFile)
	}
	if _, err := Load(LoadOptions{File: writeFile(t, "limits: { writes: 3 }\n"), Env: []string{}}); err == nil || !strings.Contains(err.Error(), `"limits.writes"`) {
		t.Errorf("Load(unknown limits key) error = %v, want it named", err)
	}
}

func TestConfig_ValidateTTL(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *TTLConfig)
		want   string
	}{
		{"negative slack", func(c *TTLConfig) { c.RenewSlack = -0.1 }, "ttl.renew_slack: -0.1 must be a fraction"},
		{"slack above the TTL", func(c *TTLConfig) { c.RenewSlack = 1.5 }, "ttl.renew_slack: 1.5 must be a fraction"},
		{"no cap", func(c *TTLConfig) { c.RenewSlackMax = 0 }, "ttl.renew_slack_max: 0s must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c.TTL)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	for _, slack := range []float64{0, 1} {
		c := validConfig()
		c.TTL.RenewSlack = slack
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with ttl.renew_slack %v = %v, want nil", slack, err)
		}
	}
}

func TestConfig_ValidateLimits(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(l *LimitsConfig)
		want   string
	}{
		{"negative rate", func(l *LimitsConfig) { l.WriteRate = -1 }, "limits.write_rate: must not be negative"},
		{"zero burst", func(l *LimitsConfig) { l.WriteBurst = 0 }, "limits.write_burst: must be at least 1"},
		{"no connections", func(l *LimitsConfig) { l.Connections = 0 }, "limits.connections: must be at least 1"},
		{"per address above the cap", func(l *LimitsConfig) { l.ConnectionsPerAddress = 40000 },
			"limits.connections_per_address: 40000 must not exceed limits.connections 32768"},
		{"no blocking queries", func(l *LimitsConfig) { l.BlockingQueries = 0 }, "limits.blocking_queries: must be at least 1"},
		{"blocking per address above the cap", func(l *LimitsConfig) { l.BlockingQueriesPerAddress = 20000 },
			"limits.blocking_queries_per_address: 20000 must not exceed limits.blocking_queries 16384"},
		{"anonymous wait too short", func(l *LimitsConfig) { l.AnonymousWait = time.Millisecond }, "limits.anonymous_wait: must be between 1s and 5m0s"},
		{"anonymous wait too long", func(l *LimitsConfig) { l.AnonymousWait = time.Hour }, "limits.anonymous_wait: must be between 1s and 5m0s"},
		{"no forward connections", func(l *LimitsConfig) { l.ForwardConnections = 0 }, "limits.forward_connections: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c.Limits)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// Rate limits off: the burst does not matter.
	c := validConfig()
	c.Limits.WriteRate, c.Limits.WriteBurst = 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with write_rate 0 = %v, want nil", err)
	}
}
