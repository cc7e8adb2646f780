package config

import (
	"path/filepath"
	"testing"
	"time"
)

// threeCandidates is a valid candidate list with node-a (the default node.id)
// matching the default advertise addresses.
func threeCandidates() []Candidate {
	return []Candidate{
		{Machine: "node-a", URL: "http://127.0.0.1:31413", Raft: "127.0.0.1:31412"},
		{Machine: "node-b", URL: "http://127.0.0.1:31423", Raft: "127.0.0.1:31422"},
		{Machine: "node-c", URL: "http://127.0.0.1:31433", Raft: "127.0.0.1:31432"},
	}
}

// validConfig is Default() with a candidate list, listening on loopback
// (plaintext beyond it is refused): it passes Validate.
func validConfig() Config {
	c := Default()
	c.Cluster.Candidates = threeCandidates()
	c.HTTP.Addr = "127.0.0.1:31413"
	return c
}

func TestDefault_Values(t *testing.T) {
	d := Default()
	checks := []struct {
		name      string
		got, want any
	}{
		{"node.id", d.Node.ID, "node-a"},
		{"node.data_dir", d.Node.DataDir, "/var/lib/elanous"},
		{"http.addr", d.HTTP.Addr, "0.0.0.0:31413"},
		{"http.advertise", d.HTTP.Advertise, "http://127.0.0.1:31413"},
		{"http.metrics_auth", d.HTTP.MetricsAuth, false},
		{"raft.addr", d.Raft.Addr, ""},
		{"raft.addr (bind)", d.Raft.BindAddr(), "127.0.0.1:31412"},
		{"raft.advertise", d.Raft.Advertise, "127.0.0.1:31412"},
		{"raft.heartbeat_timeout", d.Raft.HeartbeatTimeout, 500 * time.Millisecond},
		{"raft.election_timeout", d.Raft.ElectionTimeout, 500 * time.Millisecond},
		{"raft.leader_lease_timeout", d.Raft.LeaderLeaseTimeout, 250 * time.Millisecond},
		{"raft.commit_timeout", d.Raft.CommitTimeout, 50 * time.Millisecond},
		{"raft.snapshot_threshold", d.Raft.SnapshotThreshold, uint64(8192)},
		{"raft.snapshot_interval", d.Raft.SnapshotInterval, 5 * time.Second},
		{"raft.trailing_logs", d.Raft.TrailingLogs, uint64(2048)},
		{"raft.max_append_entries", d.Raft.MaxAppendEntries, 64},
		{"raft.grace", d.Raft.Grace, time.Duration(0)},
		{"cluster.bootstrap", d.Cluster.Bootstrap, true},
		{"cluster.candidates", len(d.Cluster.Candidates), 0},
		{"tokens.file", d.Tokens.File, ""},
		{"ports.reserved", len(d.Ports.Reserved), 3},
		{"ports.test", d.Ports.Test, Band{Start: 31450, End: 31499}},
		{"ports.offline", d.Ports.Offline, Band{Start: 31500, End: 31509}},
		{"log.level", d.Log.Level, "info"},
		{"log.format", d.Log.Format, "text"},
		{"log.access", d.Log.Access, false},
		{"tls", d.TLS, TLSConfig{}},
		{"ttl.renew_slack", d.TTL.RenewSlack, 0.25},
		{"ttl.renew_slack_max", d.TTL.RenewSlackMax, 5 * time.Minute},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("Default() %s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestDefault_ValidatesWithCandidates(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("Validate() of defaults with candidates = %v, want nil", err)
	}
	if err := Default().Validate(); err == nil {
		t.Fatal("Validate() of defaults without candidates = nil, want an error")
	}
}

func TestRaftConfig_GraceOrDefault(t *testing.T) {
	tests := []struct {
		name  string
		raft  RaftConfig
		grace time.Duration
	}{
		{"zero means twice the election timeout", RaftConfig{ElectionTimeout: 500 * time.Millisecond}, time.Second},
		{"explicit grace wins", RaftConfig{ElectionTimeout: 500 * time.Millisecond, Grace: 3 * time.Second}, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.raft.GraceOrDefault(); got != tt.grace {
				t.Errorf("GraceOrDefault() = %v, want %v", got, tt.grace)
			}
		})
	}
}

func TestConfig_TokensFile(t *testing.T) {
	c := Default()
	c.Node.DataDir = "/data"
	if got, want := c.TokensFile(), filepath.Join("/data", "control", "tokens.json"); got != want {
		t.Errorf("TokensFile() = %q, want %q", got, want)
	}
	c.Tokens.File = "/etc/elanous/tokens.json"
	if got, want := c.TokensFile(), "/etc/elanous/tokens.json"; got != want {
		t.Errorf("TokensFile() with tokens.file = %q, want %q", got, want)
	}
}

func TestConfig_Self(t *testing.T) {
	c := validConfig()
	c.Node.ID = "node-b"
	self, ok := c.Self()
	if !ok || self != c.Cluster.Candidates[1] {
		t.Errorf("Self() = %+v, %v; want %+v, true", self, ok, c.Cluster.Candidates[1])
	}
	c.Node.ID = "node-z"
	if self, ok := c.Self(); ok {
		t.Errorf("Self() for an unlisted node = %+v, true; want false", self)
	}
}

func TestBand_Contains(t *testing.T) {
	b := Band{Start: 10, End: 20}
	for port, want := range map[int]bool{9: false, 10: true, 15: true, 20: true, 21: false} {
		if got := b.Contains(port); got != want {
			t.Errorf("Band{10,20}.Contains(%d) = %v, want %v", port, got, want)
		}
	}
}
