package wire

// ClusterOverview answers GET /v1/cluster/overview (query scope): every
// candidate as the answering node sees it, each asked for its own
// /v1/cluster/status, with the primary and the test band. The web console's
// cluster view reads it (ARCHITECTURE.md, "Web console").
type ClusterOverview struct {
	// ViewedFrom is the answering node; AsOf is when it gathered the view
	// (Unix ms, its clock).
	ViewedFrom string `json:"viewedFrom"`
	AsOf       int64  `json:"asOf"`
	// Stale marks a view from a node that lags: it knows no leader, has not
	// applied its claim, or last heard from the leader more than
	// OverviewStaleMs ago.
	Stale bool `json:"stale"`
	// Leader is the leader the answering node knows ("" when none).
	Leader string `json:"leader"`
	// Primary is the answering node's /v1/primary.
	Primary Primary `json:"primary"`
	// Band is the test band leases are drawn from.
	Band PortBand `json:"band"`
	// Candidates are the servers of the Raft configuration and the
	// directory, ordered by machine.
	Candidates []OverviewCandidate `json:"candidates"`
}

// OverviewStaleMs is the last contact past which a follower's view is stale.
const OverviewStaleMs = 3000

// PortBand is an inclusive range of ports.
type PortBand struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// OverviewCandidate is one candidate of the overview. The Raft fields are
// the candidate's own answer; they are zero when it did not answer
// (Reachable false, Error says why).
type OverviewCandidate struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
	// Suffrage is voter, nonvoter or none, from the answering node's
	// configuration.
	Suffrage  string `json:"suffrage"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`

	State        string `json:"state,omitempty"`
	Ready        bool   `json:"ready"`
	Term         uint64 `json:"term"`
	Generation   uint64 `json:"generation"`
	LastIndex    uint64 `json:"lastIndex"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	// Lag is how many entries the candidate's applied index trails the
	// leader's last index (the highest last index seen when no leader
	// answered).
	Lag uint64 `json:"lag"`
	// LastContactMs: -1 never, 0 on the leader.
	LastContactMs int64  `json:"lastContactMs"`
	Voter         bool   `json:"voter"`
	Version       string `json:"version,omitempty"`
}
