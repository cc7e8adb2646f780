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

// NodeLimits are one candidate's own abuse limits (its limits.* keys): what
// the API enforces (api.Deps.Limits, converted from the configuration by
// config.LimitsConfig.Node) and what it reports.
type NodeLimits struct {
	// WriteRate is writes per second per machine token and per remote
	// address (0: no rate limit); WriteBurst the size of each bucket.
	WriteRate  float64 `json:"writeRate"`
	WriteBurst int     `json:"writeBurst"`
	// Connections and ConnectionsPerAddress cap open HTTP connections.
	Connections           int `json:"connections"`
	ConnectionsPerAddress int `json:"connectionsPerAddress"`
	// BlockingQueries and BlockingQueriesPerAddress cap waiting blocking queries.
	BlockingQueries           int `json:"blockingQueries"`
	BlockingQueriesPerAddress int `json:"blockingQueriesPerAddress"`
	// AnonymousWaitMs is the longest wait of a /v1/primary blocking query
	// without a valid token.
	AnonymousWaitMs int64 `json:"anonymousWaitMs"`
	// ForwardConnections caps the connections to the leader.
	ForwardConnections int `json:"forwardConnections"`
}
