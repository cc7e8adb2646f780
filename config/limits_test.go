package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

func TestDefaultLimits(t *testing.T) {
	d := Default()
	want := wire.NodeLimits{
		WriteRate: 100, WriteBurst: 200, Connections: 32768, ConnectionsPerAddress: 256,
		BlockingQueries: 16384, BlockingQueriesPerAddress: 64, AnonymousWaitMs: 30_000, ForwardConnections: 64,
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

// The limits.* keys decode into wire.NodeLimits, which the API enforces and
// reports as it is: limits.anonymous_wait is a duration in the file and the
// environment, whole milliseconds on the wire (anonymousWaitMs).
func TestLoad_LimitsAreTheWireLimits(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		env        []string
		want       wire.Millis
	}{
		{"default", "", nil, 30_000},
		{"file", "limits: { anonymous_wait: 1500ms }\n", nil, 1500},
		{"environment", "", []string{"ELANOUS_LIMITS_ANONYMOUS_WAIT=2m"}, 120_000},
		{"rounded down to the millisecond", "limits: { anonymous_wait: 1.0005s }\n", nil, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := LoadOptions{Env: tt.env}
			if tt.file != "" {
				opts.File = writeFile(t, tt.file)
			}
			c, err := Load(opts)
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			if c.Limits.AnonymousWaitMs != tt.want {
				t.Errorf("Load() anonymousWaitMs = %d, want %d", c.Limits.AnonymousWaitMs, tt.want)
			}
		})
	}
	if _, err := Load(LoadOptions{File: writeFile(t, "limits: { anonymous_wait: soon }\n"), Env: []string{}}); err == nil ||
		!strings.Contains(err.Error(), "anonymous_wait") {
		t.Errorf("Load(anonymous_wait: soon) error = %v, want it named", err)
	}
	l := DefaultLimits()
	l.WriteRate = 2.5
	got, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"writeRate":2.5,"writeBurst":200,"connections":32768,"connectionsPerAddress":256,` +
		`"blockingQueries":16384,"blockingQueriesPerAddress":64,"anonymousWaitMs":30000,"forwardConnections":64}`
	if string(got) != want {
		t.Errorf("json of the limits = %s, want %s", got, want)
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
	want.AnonymousWaitMs, want.ConnectionsPerAddress = 10_000, 20
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
	runInvalidCases(t, []invalidCase{
		{"negative slack", func(c *Config) { c.TTL.RenewSlack = -0.1 }, "ttl.renew_slack: -0.1 must be a fraction"},
		{"slack above the TTL", func(c *Config) { c.TTL.RenewSlack = 1.5 }, "ttl.renew_slack: 1.5 must be a fraction"},
		{"no cap", func(c *Config) { c.TTL.RenewSlackMax = 0 }, "ttl.renew_slack_max: 0s must be positive"},
	})
	for _, slack := range []float64{0, 1} {
		c := validConfig()
		c.TTL.RenewSlack = slack
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with ttl.renew_slack %v = %v, want nil", slack, err)
		}
	}
}

func TestConfig_ValidateLimits(t *testing.T) {
	runInvalidCases(t, []invalidCase{
		{"negative rate", func(c *Config) { c.Limits.WriteRate = -1 }, "limits.write_rate: must not be negative"},
		{"zero burst", func(c *Config) { c.Limits.WriteBurst = 0 }, "limits.write_burst: must be at least 1"},
		{"no connections", func(c *Config) { c.Limits.Connections = 0 }, "limits.connections: must be at least 1"},
		{"per address above the cap", func(c *Config) { c.Limits.ConnectionsPerAddress = 40000 },
			"limits.connections_per_address: 40000 must not exceed limits.connections 32768"},
		{"no blocking queries", func(c *Config) { c.Limits.BlockingQueries = 0 }, "limits.blocking_queries: must be at least 1"},
		{"blocking per address above the cap", func(c *Config) { c.Limits.BlockingQueriesPerAddress = 20000 },
			"limits.blocking_queries_per_address: 20000 must not exceed limits.blocking_queries 16384"},
		{"anonymous wait too short", func(c *Config) { c.Limits.AnonymousWaitMs = 1 }, "limits.anonymous_wait: must be between 1s and 5m0s"},
		{"anonymous wait too long", func(c *Config) { c.Limits.AnonymousWaitMs = wire.MillisOf(time.Hour) }, "limits.anonymous_wait: must be between 1s and 5m0s"},
		{"no forward connections", func(c *Config) { c.Limits.ForwardConnections = 0 }, "limits.forward_connections: must be at least 1"},
	})
	// Rate limits off: the burst does not matter.
	c := validConfig()
	c.Limits.WriteRate, c.Limits.WriteBurst = 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with write_rate 0 = %v, want nil", err)
	}
}
