package wire

import "time"

// MaxBlockingWait is the longest wait of any blocking query (?index=N&wait=D,
// Consul's semantics): the API refuses a longer wait, and
// limits.anonymous_wait may not exceed it.
const MaxBlockingWait = 5 * time.Minute

// HeaderForwardedFor carries, on a request a follower forwards to the
// leader, the address of the client that sent it (host:port). The leader
// believes it only from a candidate's address; it names the client in the
// audit log.
const HeaderForwardedFor = "X-Elanous-Forwarded-For"

// Limits are the cluster's quotas, replicated so that every candidate refuses
// the same commands (429 quota-exceeded). PUT /v1/cluster/limits takes one
// (admin scope) and replaces the set: a zero or absent field takes its
// default.
type Limits struct {
	// ResourcesPerMachine bounds the live resources of one machine.
	ResourcesPerMachine int `json:"resourcesPerMachine"`
	// LeasesPerMachine bounds the port leases one machine holds; 0 means a
	// quarter of the test band.
	LeasesPerMachine int `json:"leasesPerMachine"`
	// Resources bounds the resources of the whole cluster.
	Resources int `json:"resources"`
	// IdempotencyKeys bounds the Idempotency-Keys the cluster remembers; past
	// it the oldest are forgotten first.
	IdempotencyKeys int `json:"idempotencyKeys"`
}

// LimitsStatus answers GET and PUT /v1/cluster/limits, and is the "limits"
// of GET /v1/cluster/status.
type LimitsStatus struct {
	// Set is what was set through the log (zero: the default).
	Set Limits `json:"set"`
	// Effective is what is in force, defaults filled in (leasesPerMachine
	// for the answering node's test band).
	Effective Limits `json:"effective"`
	// Enforced is false while the cluster's format level is below 2: the
	// quotas take effect once every candidate runs a build that knows them.
	Enforced bool `json:"enforced"`
	// Node are the answering candidate's own limits (limits.* of its
	// configuration); they are not replicated.
	Node *NodeLimits `json:"node,omitempty"`
}

// NodeLimits are one candidate's own abuse limits (the limits.* keys of its
// configuration, ARCHITECTURE.md "Abuse limits"): rate limits on writes and
// caps on connections and blocking queries. It is the one declaration of
// them: config decodes the keys into it (the mapstructure tags), the API
// enforces it (api.Deps.Limits) and reports it (the "node" of
// GET /v1/cluster/limits, the json tags). Each node enforces its own; they
// are not replicated. The cluster's quotas (Limits) live in the replicated
// state instead, so that every replica refuses the same commands.
//
// The defaults (config/defaults) are far above what a fleet needs: a seed
// member writes about once every 10 s (a heartbeat of its machine and its
// instance and a renewal of each lease every 30 s) and holds one blocking
// /v1/primary query on each candidate.
type NodeLimits struct {
	// WriteRate is the sustained rate, in writes per second, allowed to one
	// machine token on this node (limits.write_rate); 0 turns the rate
	// limits off. Requests that fail authentication (a missing, malformed or
	// unknown token) are limited at the same rate per remote address.
	// Writes with a valid token are never limited by address: a whole
	// fleet may sit behind one NAT address, and the harm one authenticated
	// caller can do is bounded by its machine token's bucket and the
	// replicated quotas.
	WriteRate float64 `json:"writeRate" mapstructure:"write_rate"`
	// WriteBurst is the size of each bucket: how many writes may come at
	// once after a quiet spell (limits.write_burst).
	WriteBurst int `json:"writeBurst" mapstructure:"write_burst"`
	// Connections caps the HTTP connections this node holds open at once
	// (limits.connections); past it new connections wait in the kernel's
	// accept queue.
	Connections int `json:"connections" mapstructure:"connections"`
	// ConnectionsPerAddress caps the HTTP connections one remote address
	// holds open (limits.connections_per_address); a connection past it is
	// closed as soon as it is accepted.
	ConnectionsPerAddress int `json:"connectionsPerAddress" mapstructure:"connections_per_address"`
	// BlockingQueries caps the blocking queries (?index=N&wait=D) waiting at
	// once on this node (limits.blocking_queries); past it they are 429.
	BlockingQueries int `json:"blockingQueries" mapstructure:"blocking_queries"`
	// BlockingQueriesPerAddress caps those of one remote address
	// (limits.blocking_queries_per_address).
	BlockingQueriesPerAddress int `json:"blockingQueriesPerAddress" mapstructure:"blocking_queries_per_address"`
	// AnonymousWaitMs is the longest wait of a blocking /v1/primary query sent
	// without a valid token (limits.anonymous_wait, a duration in the
	// configuration); an authenticated one may wait MaxBlockingWait.
	AnonymousWaitMs Millis `json:"anonymousWaitMs" mapstructure:"anonymous_wait"`
	// ForwardConnections caps the connections this node opens to the leader
	// to forward writes (limits.forward_connections); past it forwards queue
	// for a connection within their time budget.
	ForwardConnections int `json:"forwardConnections" mapstructure:"forward_connections"`
}

// Millis is a duration in whole milliseconds: a JSON number of
// milliseconds on the wire, a duration ("30s") in the configuration
// (config's decode hook).
type Millis int64

// MillisOf returns d in whole milliseconds, rounded down.
func MillisOf(d time.Duration) Millis { return Millis(d.Milliseconds()) }

// Duration returns m as a time.Duration.
func (m Millis) Duration() time.Duration { return time.Duration(m) * time.Millisecond }
