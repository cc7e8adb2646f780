package config

import (
	"path/filepath"
	"time"

	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/wire"
)

// Config is the whole configuration of one elanous-node process. Build one
// with Default or Load and check it with Validate before use; the zero value
// is not valid.
type Config struct {
	Node    NodeConfig    `mapstructure:"node"`
	HTTP    HTTPConfig    `mapstructure:"http"`
	Raft    RaftConfig    `mapstructure:"raft"`
	Cluster ClusterConfig `mapstructure:"cluster"`
	Tokens  TokensConfig  `mapstructure:"tokens"`
	Ports   PortsConfig   `mapstructure:"ports"`
	Log     LogConfig     `mapstructure:"log"`
	TLS     TLSConfig     `mapstructure:"tls"`
	// Limits are this node's own abuse limits (limits.*), declared once as
	// wire.NodeLimits: the API enforces and reports them as decoded.
	Limits wire.NodeLimits `mapstructure:"limits"`
	TTL    TTLConfig       `mapstructure:"ttl"`
}

// TTLConfig tunes how TTLs are renewed (ARCHITECTURE.md, "Renewals").
type TTLConfig struct {
	// RenewSlack is the renewal slack as a fraction of a record's TTL
	// (ttl.renew_slack, 0 to 1, default 0.25). A heartbeat or lease renewal
	// the replicated state does not already cover is written to expire at
	// now + TTL + slack; the renewals the state covers are answered without
	// a log entry. 0 makes every renewal a log entry. The price: a member
	// that dies expires between TTL and TTL + slack after its last renewal.
	RenewSlack float64 `mapstructure:"renew_slack"`
	// RenewSlackMax caps the slack (ttl.renew_slack_max, default 5m).
	RenewSlackMax time.Duration `mapstructure:"renew_slack_max"`
}

// NodeConfig names this node and says where it keeps its state.
type NodeConfig struct {
	// ID is this node's candidate name (node.id); it must appear in
	// cluster.candidates and is the Raft server ID.
	ID string `mapstructure:"id"`
	// DataDir holds the Raft stores, snapshots and control/tokens.json (node.data_dir).
	DataDir string `mapstructure:"data_dir"`
}

// HTTPConfig configures the HTTP API listener.
type HTTPConfig struct {
	// Addr is the host:port the API listens on (http.addr).
	Addr string `mapstructure:"addr"`
	// Advertise is the origin clients reach this node at (http.advertise),
	// e.g. http://10.0.0.1:31413.
	Advertise string `mapstructure:"advertise"`
	// MetricsAuth, when true, makes /metrics require a query-scope token
	// (http.metrics_auth); by default /metrics needs no token.
	MetricsAuth bool `mapstructure:"metrics_auth"`
}

// RaftConfig configures the Raft transport and timing. The durations and
// limits mirror hashicorp/raft's Config fields of the same names.
type RaftConfig struct {
	// Addr is the host:port the Raft transport listens on (raft.addr); empty
	// means Advertise (see BindAddr), so Raft is not exposed on every
	// interface by default.
	Addr string `mapstructure:"addr"`
	// Advertise is the host:port other candidates dial (raft.advertise).
	Advertise          string        `mapstructure:"advertise"`
	HeartbeatTimeout   time.Duration `mapstructure:"heartbeat_timeout"`
	ElectionTimeout    time.Duration `mapstructure:"election_timeout"`
	LeaderLeaseTimeout time.Duration `mapstructure:"leader_lease_timeout"`
	CommitTimeout      time.Duration `mapstructure:"commit_timeout"`
	SnapshotThreshold  uint64        `mapstructure:"snapshot_threshold"`
	SnapshotInterval   time.Duration `mapstructure:"snapshot_interval"`
	TrailingLogs       uint64        `mapstructure:"trailing_logs"`
	MaxAppendEntries   int           `mapstructure:"max_append_entries"`
	// Grace is added to every live TTL when a new leader rebases them
	// (raft.grace); 0 means twice the election timeout (see GraceOrDefault).
	Grace time.Duration `mapstructure:"grace"`
	// BatchApply lets the leader take up to max_append_entries queued
	// entries per disk write (raft.batch_apply; hashicorp/raft's BatchApplyCh).
	BatchApply bool `mapstructure:"batch_apply"`
	// ParallelWrite lets the leader send new entries to the followers while
	// it writes them to its own disk, instead of after (raft.parallel_write;
	// cluster.Config.ParallelWrite).
	ParallelWrite bool `mapstructure:"parallel_write"`
	// LogCache is how many recent log entries are kept in memory so
	// replication does not read them back from disk (raft.log_cache; 0: none).
	LogCache int `mapstructure:"log_cache"`
	// NoFreelistSync skips writing boltdb's freelist on every commit; it is
	// rebuilt by a scan when the store opens (raft.no_freelist_sync).
	NoFreelistSync bool `mapstructure:"no_freelist_sync"`
	// MaxBatch is the most commands one group-commit entry carries
	// (raft.max_batch; 1 turns group commit off).
	MaxBatch int `mapstructure:"max_batch"`
	// FastFailover lets a follower whose leader's process died (its Raft
	// address refuses connections) stand for election as soon as raft's
	// rules allow, in an order shared with the other survivors
	// (raft.fast_failover; cluster.Config.FastFailover).
	FastFailover bool `mapstructure:"fast_failover"`
}

// BindAddr returns the address the Raft transport listens on: Addr when set,
// otherwise Advertise.
func (r RaftConfig) BindAddr() string {
	if r.Addr != "" {
		return r.Addr
	}
	return r.Advertise
}

// GraceOrDefault returns the failover grace added to live TTLs by a new
// leader's claim: Grace when set, otherwise twice ElectionTimeout.
func (r RaftConfig) GraceOrDefault() time.Duration {
	if r.Grace > 0 {
		return r.Grace
	}
	return defaults.Grace(r.ElectionTimeout)
}

// ClusterConfig lists the candidates and says whether this node may bootstrap.
type ClusterConfig struct {
	// Bootstrap lets a node with no Raft state bootstrap the cluster from
	// Candidates (cluster.bootstrap). Every candidate may be given the same list.
	Bootstrap bool `mapstructure:"bootstrap"`
	// Candidates are the voters of the cluster, this node included (cluster.candidates).
	Candidates []Candidate `mapstructure:"candidates"`
}

// Candidate is one voter of the cluster: its name, API origin and Raft address.
type Candidate struct {
	// Machine is the candidate's name (its node.id), matching wire.ValidCandidate.
	Machine string `mapstructure:"machine" json:"machine"`
	// URL is the candidate's HTTP API origin, e.g. http://10.0.0.1:31413.
	URL string `mapstructure:"url" json:"url"`
	// Raft is the candidate's advertised Raft host:port, e.g. 10.0.0.1:31412.
	Raft string `mapstructure:"raft" json:"raft"`
}

// TokensConfig locates the cluster tokens file.
type TokensConfig struct {
	// File is the path of tokens.json (tokens.file); empty means
	// <node.data_dir>/control/tokens.json (see Config.TokensFile).
	File string `mapstructure:"file"`
}

// PortsConfig describes the ports the coordinator hands out and avoids.
type PortsConfig struct {
	// Reserved ports are never leased (ports.reserved).
	Reserved []int `mapstructure:"reserved"`
	// Test is the band port leases are drawn from (ports.test).
	Test Band `mapstructure:"test"`
	// Offline is a band kept apart for offline use (ports.offline); it must not overlap Test.
	Offline Band `mapstructure:"offline"`
}

// Band is an inclusive range of ports, Start through End.
type Band struct {
	Start int `mapstructure:"start"`
	End   int `mapstructure:"end"`
}

// Contains reports whether port lies in the band.
func (b Band) Contains(port int) bool { return port >= b.Start && port <= b.End }

// LogConfig configures the process's structured logs.
type LogConfig struct {
	// Level is debug, info, warn or error (log.level).
	Level string `mapstructure:"level"`
	// Format is text or json (log.format).
	Format string `mapstructure:"format"`
	// Access turns on the HTTP access log: one Info line per request
	// (log.access); off by default.
	Access bool `mapstructure:"access"`
	// AuditFile is where the audit log goes (log.audit_file): one JSON line
	// per admin action and per authentication failure, appended to a file
	// created with mode 0600. Empty means the main log, each line marked
	// audit=true.
	AuditFile string `mapstructure:"audit_file"`
}

// TLSConfig turns on TLS: HTTPS for the API and mutual TLS for Raft (tls.*).
// It is on when any of the three files is set, and then all three are needed.
// Client commands read only CAFile (and, for an API that verifies clients,
// CertFile and KeyFile).
type TLSConfig struct {
	// CAFile is the PEM file of the cluster CA (tls.ca_file): peers, the
	// leader and API servers are verified against it.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are this node's certificate, which must name
	// node.id (tls.cert_file, tls.key_file); "elanous-node tls cert" makes them.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// VerifyIncomingAPI makes the API require a client certificate of the CA
	// as well as a token (tls.verify_incoming_api).
	VerifyIncomingAPI bool `mapstructure:"verify_incoming_api"`
	// AllowPlaintext lets serve listen beyond loopback without TLS
	// (tls.allow_plaintext); without it such a configuration is refused.
	AllowPlaintext bool `mapstructure:"allow_plaintext"`
}

// Enabled reports whether TLS is configured for serving (any file set).
func (t TLSConfig) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// Default returns the built-in configuration: every key's default, with no
// candidates. Load starts from it; a Config from Default alone fails
// Validate until cluster.candidates is set.
func Default() Config {
	return Config{
		Node: NodeConfig{ID: "node-a", DataDir: "/var/lib/elanous"},
		HTTP: HTTPConfig{
			Addr:      "0.0.0.0:31413",
			Advertise: "http://127.0.0.1:31413",
		},
		Raft: RaftConfig{
			Advertise:          "127.0.0.1:31412",
			HeartbeatTimeout:   defaults.HeartbeatTimeout,
			ElectionTimeout:    defaults.ElectionTimeout,
			LeaderLeaseTimeout: defaults.LeaderLeaseTimeout,
			CommitTimeout:      defaults.CommitTimeout,
			SnapshotThreshold:  defaults.SnapshotThreshold,
			SnapshotInterval:   defaults.SnapshotInterval,
			TrailingLogs:       defaults.TrailingLogs,
			MaxAppendEntries:   defaults.MaxAppendEntries,
			BatchApply:         true,
			ParallelWrite:      true,
			LogCache:           1024,
			NoFreelistSync:     true,
			MaxBatch:           defaults.MaxBatch,
			FastFailover:       true,
		},
		Cluster: ClusterConfig{Bootstrap: true},
		Ports: PortsConfig{
			Reserved: []int{31413, 31414, 31420},
			Test:     Band{Start: 31450, End: 31499},
			Offline:  Band{Start: 31500, End: 31509},
		},
		Log:    LogConfig{Level: "info", Format: "text"},
		Limits: DefaultLimits(),
		TTL:    TTLConfig{RenewSlack: defaults.RenewSlack, RenewSlackMax: defaults.RenewSlackMax},
	}
}

// TokensFile returns the path of the cluster tokens file: tokens.file when
// set, otherwise <node.data_dir>/control/tokens.json.
func (c *Config) TokensFile() string {
	if c.Tokens.File != "" {
		return c.Tokens.File
	}
	return filepath.Join(c.Node.DataDir, "control", "tokens.json")
}

// Self returns the entry of cluster.candidates whose machine is node.id, and
// false when there is none.
func (c Config) Self() (Candidate, bool) {
	for _, cand := range c.Cluster.Candidates {
		if cand.Machine == c.Node.ID {
			return cand, true
		}
	}
	return Candidate{}, false
}
