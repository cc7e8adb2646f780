package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// invalidCase is a change that makes a valid configuration invalid, and a
// substring of the error Validate must then return.
type invalidCase struct {
	name   string
	mutate func(c *Config)
	want   string
}

// runInvalidCases checks that each case's change makes Validate fail with
// its error.
func runInvalidCases(t *testing.T, tests []invalidCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestConfig_Validate(t *testing.T) {
	runInvalidCases(t, []invalidCase{
		// node
		{"node id uppercase", func(c *Config) { c.Node.ID = "Node-A" }, `node.id: "Node-A" must match`},
		{"node id leading dash", func(c *Config) { c.Node.ID = "-a" }, `node.id: "-a" must match`},
		{"node id too long", func(c *Config) { c.Node.ID = strings.Repeat("a", 33) }, "node.id:"},
		{"node id empty", func(c *Config) { c.Node.ID = "" }, `node.id: "" must match`},
		{"data dir empty", func(c *Config) { c.Node.DataDir = "" }, "node.data_dir: must not be empty"},

		// http
		{"http addr no port", func(c *Config) { c.HTTP.Addr = "0.0.0.0" }, `http.addr: "0.0.0.0" is not host:port`},
		{"http addr port zero", func(c *Config) { c.HTTP.Addr = "0.0.0.0:0" }, "http.addr: \"0.0.0.0:0\": port must be 1-65535"},
		{"http addr port too big", func(c *Config) { c.HTTP.Addr = ":65536" }, "http.addr: \":65536\": port must be 1-65535"},
		{"http advertise ftp", func(c *Config) { c.HTTP.Advertise = "ftp://127.0.0.1:31413" }, "http.advertise: invalid URL \"ftp://127.0.0.1:31413\": scheme must be http or https"},
		{"http advertise path", func(c *Config) { c.HTTP.Advertise = "http://127.0.0.1:31413/api" }, "http.advertise: invalid URL \"http://127.0.0.1:31413/api\": must be an origin with no path"},
		{"http advertise credentials", func(c *Config) { c.HTTP.Advertise = "http://u:p@127.0.0.1:31413" }, "http.advertise: invalid URL: an address must not carry a user or password"},
		{"http advertise unspecified", func(c *Config) { c.HTTP.Advertise = "http://0.0.0.0:31413" }, "http.advertise: \"http://0.0.0.0:31413\": unspecified address"},
		{"http advertise differs from own candidate", func(c *Config) { c.HTTP.Advertise = "http://127.0.0.2:31413" },
			`http.advertise: "http://127.0.0.2:31413" differs from this node's candidate url "http://127.0.0.1:31413"`},

		// raft addresses
		{"raft addr not host:port", func(c *Config) { c.Raft.Addr = "31412" }, `raft.addr: "31412" is not host:port`},
		{"raft advertise empty host", func(c *Config) { c.Raft.Advertise = ":31412" }, `raft.advertise: ":31412": host must not be empty`},
		{"raft advertise unspecified", func(c *Config) { c.Raft.Advertise = "[::]:31412" }, `raft.advertise: "[::]:31412": unspecified address`},
		{"raft advertise differs from own candidate", func(c *Config) { c.Raft.Advertise = "127.0.0.1:9999" },
			`raft.advertise: "127.0.0.1:9999" differs from this node's candidate raft address "127.0.0.1:31412"`},

		// raft timing (hashicorp/raft's ValidateConfig)
		{"heartbeat too low", func(c *Config) {
			c.Raft.HeartbeatTimeout = 4 * time.Millisecond
			c.Raft.LeaderLeaseTimeout = 4 * time.Millisecond
		},
			"raft.heartbeat_timeout: must be at least 5ms (got 4ms)"},
		{"election too low", func(c *Config) { c.Raft.ElectionTimeout = time.Millisecond }, "raft.election_timeout: must be at least 5ms (got 1ms)"},
		{"lease too low", func(c *Config) { c.Raft.LeaderLeaseTimeout = 0 }, "raft.leader_lease_timeout: must be at least 5ms (got 0s)"},
		{"commit timeout zero", func(c *Config) { c.Raft.CommitTimeout = 0 }, "raft.commit_timeout: must be at least 1ms (got 0s)"},
		{"snapshot interval too low", func(c *Config) { c.Raft.SnapshotInterval = time.Millisecond }, "raft.snapshot_interval: must be at least 5ms"},
		{"lease above heartbeat", func(c *Config) { c.Raft.LeaderLeaseTimeout = 600 * time.Millisecond },
			"raft.leader_lease_timeout: 600ms must not exceed raft.heartbeat_timeout 500ms"},
		{"election below heartbeat", func(c *Config) { c.Raft.ElectionTimeout = 400 * time.Millisecond },
			"raft.election_timeout: 400ms must be at least raft.heartbeat_timeout 500ms"},
		{"snapshot threshold zero", func(c *Config) { c.Raft.SnapshotThreshold = 0 }, "raft.snapshot_threshold: must be greater than 0"},
		{"trailing logs zero", func(c *Config) { c.Raft.TrailingLogs = 0 }, "raft.trailing_logs: must be greater than 0"},
		{"max append entries zero", func(c *Config) { c.Raft.MaxAppendEntries = 0 }, "raft.max_append_entries: must be 1-1024 (got 0)"},
		{"max append entries too large", func(c *Config) { c.Raft.MaxAppendEntries = 1025 }, "raft.max_append_entries: must be 1-1024 (got 1025)"},
		{"grace negative", func(c *Config) { c.Raft.Grace = -time.Second }, "raft.grace: must not be negative"},

		// cluster
		{"no candidates", func(c *Config) { c.Cluster.Candidates = nil }, "cluster.candidates: must list at least one candidate"},
		{"joining node lists itself wrongly", func(c *Config) { c.Cluster.Bootstrap = false; c.Raft.Advertise = "127.0.0.1:9999" },
			`raft.advertise: "127.0.0.1:9999" differs from this node's candidate raft address`},
		{"candidate bad machine", func(c *Config) { c.Cluster.Candidates[1].Machine = "Node_B" },
			`cluster.candidates[1].machine: "Node_B" must match`},
		{"candidate duplicate machine", func(c *Config) { c.Cluster.Candidates[2].Machine = "node-b" },
			`cluster.candidates[2].machine: duplicate machine "node-b" (also cluster.candidates[1])`},
		{"candidate bad url", func(c *Config) { c.Cluster.Candidates[1].URL = "http://127.0.0.1:31423/?x=1" },
			`cluster.candidates[1].url: invalid URL "http://127.0.0.1:31423/?x=1": must not have a query`},
		{"candidate url fragment", func(c *Config) { c.Cluster.Candidates[1].URL = "http://127.0.0.1:31423#top" },
			`cluster.candidates[1].url: invalid URL "http://127.0.0.1:31423#top": must not have a fragment`},
		{"candidate duplicate url after normalization", func(c *Config) { c.Cluster.Candidates[2].URL = "HTTP://127.0.0.1:31423/" },
			`cluster.candidates[2].url: duplicate url "http://127.0.0.1:31423" (also cluster.candidates[1])`},
		{"candidate bad raft", func(c *Config) { c.Cluster.Candidates[1].Raft = "127.0.0.1" },
			`cluster.candidates[1].raft: "127.0.0.1" is not host:port`},
		{"candidate raft unspecified", func(c *Config) { c.Cluster.Candidates[1].Raft = "0.0.0.0:31422" },
			`cluster.candidates[1].raft: "0.0.0.0:31422": unspecified address`},
		{"candidate duplicate raft", func(c *Config) { c.Cluster.Candidates[2].Raft = "127.0.0.1:31422" },
			`cluster.candidates[2].raft: duplicate raft address "127.0.0.1:31422" (also cluster.candidates[1])`},
		{"self not a candidate", func(c *Config) { c.Node.ID = "node-d" }, `cluster.candidates: node.id "node-d" is not among the candidates`},

		// ports
		{"test band reversed", func(c *Config) { c.Ports.Test = Band{Start: 31499, End: 31450} }, "ports.test: start 31499 must not exceed end 31450"},
		{"test band start zero", func(c *Config) { c.Ports.Test.Start = 0 }, "ports.test.start: port 0 must be 1-65535"},
		{"offline band end too big", func(c *Config) { c.Ports.Offline.End = 70000 }, "ports.offline.end: port 70000 must be 1-65535"},
		{"bands overlap", func(c *Config) { c.Ports.Offline = Band{Start: 31499, End: 31509} },
			"ports.offline: 31499-31509 overlaps ports.test 31450-31499"},
		{"offline band inside test band", func(c *Config) { c.Ports.Offline = Band{Start: 31460, End: 31461} },
			"ports.offline: 31460-31461 overlaps ports.test"},
		{"reserved in test band", func(c *Config) { c.Ports.Reserved = []int{31413, 31450} },
			"ports.reserved[1]: port 31450 lies in ports.test 31450-31499"},
		{"reserved in offline band", func(c *Config) { c.Ports.Reserved = []int{31509} },
			"ports.reserved[0]: port 31509 lies in ports.offline 31500-31509"},
		{"reserved out of range", func(c *Config) { c.Ports.Reserved = []int{0} }, "ports.reserved[0]: port 0 must be 1-65535"},

		// tls and plaintext
		{"plaintext on every interface", func(c *Config) { c.HTTP.Addr = "0.0.0.0:31413" },
			`http.addr: "0.0.0.0:31413" listens beyond loopback but TLS is off`},
		{"plaintext raft on an address", func(c *Config) { c.Raft.Addr = "10.0.0.1:31412" },
			`raft.addr: "10.0.0.1:31412" listens beyond loopback but TLS is off`},
		{"plaintext names the fix", func(c *Config) { c.HTTP.Addr = ":31413" }, "tls.allow_plaintext: true"},
		{"tls without key", func(c *Config) { c.TLS = tlsOn(); c.TLS.KeyFile = "" }, "tls.key_file: must be set when TLS is on"},
		{"tls without ca", func(c *Config) { c.TLS = tlsOn(); c.TLS.CAFile = "" }, "tls.ca_file: must be set when TLS is on"},
		{"tls with http advertise", func(c *Config) { c.TLS = tlsOn() }, `http.advertise: "http://127.0.0.1:31413" must be https:// with TLS on`},
		{"tls with an http candidate", func(c *Config) { c.TLS = tlsOn() }, `cluster.candidates[1].url: "http://127.0.0.1:31423" must be https:// with TLS on`},
		{"verify incoming api without tls", func(c *Config) { c.TLS.VerifyIncomingAPI = true }, "tls.verify_incoming_api: needs tls.ca_file"},

		// log
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, `log.level: "verbose" must be one of debug, info, warn, error`},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `log.format: "xml" must be one of text, json`},
	})
}

// tlsOn is a complete tls section.
func tlsOn() TLSConfig {
	return TLSConfig{CAFile: "/etc/elanous/tls/ca.pem", CertFile: "/etc/elanous/tls/node-a.pem", KeyFile: "/etc/elanous/tls/node-a-key.pem"}
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Node.DataDir = ""
	c.Log.Level = "loud"
	c.Ports.Test = Band{Start: 2, End: 1}
	err := c.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("Validate() = %v, want errors joined with errors.Join", err)
	}
	if got := len(joined.Unwrap()); got != 3 {
		t.Errorf("Validate() reported %d problems, want 3:\n%v", got, err)
	}
}

func TestConfig_ValidateAcceptsVariants(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"single candidate", func(c *Config) { c.Cluster.Candidates = c.Cluster.Candidates[:1] }},
		{"listen on all interfaces without host, plaintext allowed", func(c *Config) {
			c.HTTP.Addr, c.Raft.Addr, c.TLS.AllowPlaintext = ":31413", ":31412", true
		}},
		{"listen on localhost without tls", func(c *Config) { c.HTTP.Addr, c.Raft.Addr = "localhost:31413", "[::1]:31412" }},
		{"tls with https everywhere on every interface", func(c *Config) {
			c.TLS = tlsOn()
			c.TLS.VerifyIncomingAPI = true
			c.HTTP.Addr, c.Raft.Addr = "0.0.0.0:31413", "0.0.0.0:31412"
			c.HTTP.Advertise = "https://127.0.0.1:31413"
			for i := range c.Cluster.Candidates {
				c.Cluster.Candidates[i].URL = strings.Replace(c.Cluster.Candidates[i].URL, "http:", "https:", 1)
			}
		}},
		{"advertise written differently from candidate url", func(c *Config) { c.HTTP.Advertise = "HTTP://127.0.0.1:31413/" }},
		{"https candidates with default port", func(c *Config) {
			c.HTTP.Advertise = "https://a.example"
			c.Cluster.Candidates[0].URL = "https://a.example:443"
		}},
		{"equal timeouts", func(c *Config) {
			c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout, c.Raft.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		}},
		{"no reserved ports", func(c *Config) { c.Ports.Reserved = nil }},
		{"adjacent bands", func(c *Config) { c.Ports.Offline = Band{Start: 31500, End: 31500} }},
		{"json debug logs", func(c *Config) { c.Log = LogConfig{Level: "debug", Format: "json"} }},
		// A node that waits to be added (peers add) need not list itself, nor anyone.
		{"joining node not among the candidates", func(c *Config) {
			c.Cluster.Bootstrap = false
			c.Node.ID, c.HTTP.Advertise, c.Raft.Advertise = "node-d", "http://127.0.0.1:31443", "127.0.0.1:31442"
		}},
		{"joining node without candidates", func(c *Config) {
			c.Cluster.Bootstrap, c.Cluster.Candidates = false, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}
