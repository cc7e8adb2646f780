package wire

// Error codes of the membership routes (/v1/cluster/peers).
const (
	// CodeQuorumAtRisk (409): a removal or demotion would leave a voter set
	// whose reachable members are not a majority; ?force=true overrides.
	CodeQuorumAtRisk = "quorum-at-risk"
	// CodePeerExists (409): another server has the name at another Raft
	// address, or another machine has the Raft address or the URL.
	CodePeerExists = "peer-exists"
	// CodeFormatTooOld (409): the cluster's format level is below 2, so it
	// has no replicated candidate directory yet (a server runs an older build).
	CodeFormatTooOld = "format-too-old"
)

// Suffrages of a Peer.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
	// SuffrageNone marks a directory entry that is not (or not yet, or no
	// longer) a server of the Raft configuration.
	SuffrageNone = "none"
)

// Peer is one server of the cluster (GET /v1/cluster/peers): an entry of the
// replicated candidate directory and of the Raft configuration.
type Peer struct {
	Machine string `json:"machine"`
	// URL is the server's API origin; "" when no URL is known for it.
	URL  string `json:"url"`
	Raft string `json:"raft"`
	// Suffrage is voter, nonvoter or none (SuffrageNone).
	Suffrage string `json:"suffrage"`
	// Promoting marks a non-voter the leader will promote once it has
	// caught up (added without --nonvoter).
	Promoting bool `json:"promoting,omitempty"`
	// Demoting marks a voter the leader will demote (a demotion that was
	// interrupted).
	Demoting bool `json:"demoting,omitempty"`
	// Leader marks the server the answering node believes leads.
	Leader bool `json:"leader"`
	// AddedAt is when the directory got the entry (cluster time, Unix ms);
	// 0 when the directory does not list it.
	AddedAt int64 `json:"addedAt,omitempty"`
	// Health is the leader's latest probe of the server; absent when the
	// answering node does not lead (read with ?consistent=true).
	Health *PeerHealth `json:"health,omitempty"`
}

// PeerHealth is the leader's view of one server.
type PeerHealth struct {
	Reachable bool `json:"reachable"`
	// LastContactMs is the server's time since it last heard from a leader
	// (0 on the leader, -1 unknown).
	LastContactMs int64 `json:"lastContactMs"`
	// AppliedIndex is the last entry the server's state machine applied.
	AppliedIndex uint64 `json:"appliedIndex"`
	// Lag is how many entries the leader had applied beyond it.
	Lag uint64 `json:"lag"`
	// CaughtUp reports whether it is within the promotion threshold now.
	CaughtUp bool `json:"caughtUp"`
	// ProbedAt is when the leader last asked (Unix ms).
	ProbedAt int64 `json:"probedAt"`
}

// AddPeerRequest is the body of POST /v1/cluster/peers.
type AddPeerRequest struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
	Raft    string `json:"raft"`
	// Nonvoter keeps the server a non-voter; otherwise the leader promotes it
	// once it has caught up.
	Nonvoter bool `json:"nonvoter,omitempty"`
}

// JoinCandidate is an entry of the join file's "candidates": a candidate
// the member learned from the cluster (GET /v1/cluster/peers), which the
// TypeScript client ignores.
type JoinCandidate struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
}
