package wire

import "encoding/json"

// Headers used by the API.
const (
	// HeaderPortLeaseID carries the lease id on lease heartbeat and release.
	HeaderPortLeaseID = "x-port-lease-id"
	// HeaderIdempotencyKey makes a repeated acquire return the lease it created.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderGeneration is the generation (leader term) of the claim a read saw.
	HeaderGeneration = "X-Elanous-Generation"
	// HeaderIndex is the Raft index of the last change to what a read returns.
	HeaderIndex = "X-Elanous-Index"
	// HeaderKnownLeader is "true" when the answering node knows a leader.
	HeaderKnownLeader = "X-Elanous-Known-Leader"
	// HeaderLastContactMs is the milliseconds since the node last heard from its leader (0 on the leader).
	HeaderLastContactMs = "X-Elanous-Last-Contact-Ms"
	// HeaderForwarded marks a request a follower forwarded to the leader; a node never forwards it again.
	HeaderForwarded = "X-Elanous-Forwarded-By"
)

// Error codes: the "error" field of every error body.
const (
	CodeInvalidRequest    = "invalid-request"      // 400: malformed body, unknown field, bad value
	CodeInvalidPortLease  = "invalid-port-lease"   // 400: bad acquire, port outside the band, missing lease header
	CodeUnauthorized      = "unauthorized"         // 401: no token, malformed or unknown token
	CodeForbidden         = "forbidden"            // 403: token lacks the scope, machine or ownership
	CodeNotFound          = "not-found"            // 404: no such record (or it has expired)
	CodeMethodNotAllowed  = "method-not-allowed"   // 405
	CodeLeaseMismatch     = "lease-mismatch"       // 409: the port is held under another lease id
	CodePortBandExhausted = "port-band-exhausted"  // 409: no free port in the test band
	CodeIdempotencyUsed   = "idempotency-key-used" // 409: the key's lease was released or expired
	CodeBodyTooLarge      = "body-too-large"       // 413: body over 64 KiB
	CodeQuotaExceeded     = "quota-exceeded"       // 429: a replicated limit would be passed (the message names it)
	CodeRateLimited       = "rate-limited"         // 429: too many writes from this token or address; see Retry-After
	CodeNoLeader          = "no-leader"            // 503: no leader known, retry later
	CodeNotReady          = "not-ready"            // 503: leader elected but its claim is not applied here yet
	CodeOutcomeUnknown    = "outcome-unknown"      // 503: the write may or may not have been applied
	CodeInternal          = "internal"             // 500
	CodeClientClosed      = "client-closed"        // 499: never sent; the client left first (metrics and logs say so)
)

// Error is the body of every error response.
type Error struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Primary is the body of GET /v1/primary.
type Primary struct {
	Known      bool   `json:"known"`
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	URL        string `json:"url"`
}

// RegisterRequest is the body of POST /v1/resources/register. Owner is accepted
// and ignored: the server sets it from the token.
type RegisterRequest struct {
	ID         string                     `json:"id"`
	Kind       string                     `json:"kind"`
	Name       string                     `json:"name"`
	Machine    string                     `json:"machine"`
	Owner      string                     `json:"owner"`
	Endpoint   string                     `json:"endpoint,omitempty"`
	Attrs      map[string]json.RawMessage `json:"attrs,omitempty"`
	ObservedAt int64                      `json:"observedAt"`
	TTLMs      int64                      `json:"ttlMs"`
}

// Resource is a registered machine or instance.
type Resource struct {
	ID           string                     `json:"id"`
	Kind         string                     `json:"kind"`
	Name         string                     `json:"name"`
	Machine      string                     `json:"machine"`
	Owner        string                     `json:"owner"`
	Endpoint     string                     `json:"endpoint,omitempty"`
	Attrs        map[string]json.RawMessage `json:"attrs"`
	ObservedAt   int64                      `json:"observedAt"`
	TTLMs        int64                      `json:"ttlMs"`
	RegisteredAt int64                      `json:"registeredAt"`
	RenewedAt    int64                      `json:"renewedAt"`
	ExpiresAt    int64                      `json:"expiresAt"`
	Revision     uint64                     `json:"revision"`
}

// HeartbeatRequest is the optional body of POST /v1/resources/{id}/heartbeat;
// attrs are merged key by key into the record's.
type HeartbeatRequest struct {
	Attrs map[string]json.RawMessage `json:"attrs,omitempty"`
}

// HeartbeatResponse answers a resource heartbeat.
type HeartbeatResponse struct {
	ID        string `json:"id"`
	ExpiresAt int64  `json:"expiresAt"`
}

// AcquireRequest is the body of POST /v1/leases/port. Owner is accepted and ignored.
type AcquireRequest struct {
	Machine  string `json:"machine"`
	Purpose  string `json:"purpose"`
	TTLMs    int64  `json:"ttlMs"`
	Excluded []int  `json:"excluded,omitempty"`
	Owner    string `json:"owner,omitempty"`
}

// PortLease is a port of the test band held by one owner.
type PortLease struct {
	ID         string `json:"id"`
	Port       int    `json:"port"`
	LeaseID    string `json:"leaseId"`
	Machine    string `json:"machine"`
	Purpose    string `json:"purpose"`
	Owner      string `json:"owner"`
	TTLMs      int64  `json:"ttlMs"`
	GrantedAt  int64  `json:"grantedAt"`
	RenewedAt  int64  `json:"renewedAt"`
	ExpiresAt  int64  `json:"expiresAt"`
	Generation uint64 `json:"generation"`
	Fence      uint64 `json:"fence"`
}

// LeaseHeartbeatResponse answers POST /v1/leases/port/{port}/heartbeat.
type LeaseHeartbeatResponse struct {
	Port      int    `json:"port"`
	LeaseID   string `json:"leaseId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// IssueTokenRequest is the body of POST /v1/tokens/member.
type IssueTokenRequest struct {
	Machine string `json:"machine"`
}

// IssuedToken answers POST /v1/tokens/member; the token is shown this once.
type IssuedToken struct {
	Machine  string `json:"machine"`
	Token    string `json:"token"`
	IssuedAt string `json:"issuedAt"`
}

// TokenInfo lists a machine token without its secret.
type TokenInfo struct {
	Machine  string `json:"machine"`
	IssuedAt string `json:"issuedAt"`
}

// ClusterStatus answers GET /v1/cluster/status: this node's view of Raft.
type ClusterStatus struct {
	Machine       string          `json:"machine"`
	URL           string          `json:"url"`
	State         string          `json:"state"` // Leader, Follower, Candidate, Shutdown
	Term          uint64          `json:"term"`
	Generation    uint64          `json:"generation"`
	Leader        string          `json:"leader"` // machine name of the known leader, "" if none
	LeaderURL     string          `json:"leaderUrl"`
	CommitIndex   uint64          `json:"commitIndex"`
	AppliedIndex  uint64          `json:"appliedIndex"`
	LastIndex     uint64          `json:"lastIndex"`
	LastContactMs int64           `json:"lastContactMs"` // -1 when never contacted, 0 on the leader
	Voter         bool            `json:"voter"`
	Ready         bool            `json:"ready"`
	Configuration []ServerInfo    `json:"configuration"`
	Primary       PrimaryClaim    `json:"primary"`
	Counts        Counts          `json:"counts"`
	StateHash     string          `json:"stateHash"`
	Raft          json.RawMessage `json:"raft,omitempty"`
	// Limits are the cluster's quotas and this node's own limits.
	Limits *LimitsStatus `json:"limits,omitempty"`

	// Format is the cluster's format level as this node has applied it.
	Format int `json:"format"`
	// Version is the version of this node's build ("" from a build that
	// does not say).
	Version string `json:"version,omitempty"`
}

// ServerInfo is one member of the Raft configuration.
type ServerInfo struct {
	Machine  string `json:"machine"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
}

// PrimaryClaim is the replicated primary record.
type PrimaryClaim struct {
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	ClaimedAt  int64  `json:"claimedAt"`
	Index      uint64 `json:"index"`
}

// Counts sums the replicated tables.
type Counts struct {
	Resources int `json:"resources"`
	Leases    int `json:"leases"`
	Tokens    int `json:"tokens"`
}

// JoinFile is control/join.json on a member machine (mode 0600). Either Tokens
// (scoped cluster tokens) or Machine+Token (a machine token) is set.
type JoinFile struct {
	URL     string            `json:"url"`
	Tokens  map[string]string `json:"tokens,omitempty"`
	Machine string            `json:"machine,omitempty"`
	Token   string            `json:"token,omitempty"`
	// CA is the PEM of the cluster CA when the cluster runs TLS: the member
	// verifies every candidate against it and needs nothing else.
	CA string `json:"ca,omitempty"`
}

// TokensFile is control/tokens.json on a candidate (mode 0600).
type TokensFile struct {
	Admin  string `json:"admin"`
	Member string `json:"member"`
	Query  string `json:"query"`
}

// ConfirmRequest is the body of POST /v1/cluster/confirm: a follower asks the
// leader to confirm its leadership for the renewals waiting on the follower
// (ARCHITECTURE.md, "Renewals"). Machine and Applied tell the leader who asks
// and how far it has applied, so the leader can announce its commit index to
// a follower behind it.
type ConfirmRequest struct {
	Machine string `json:"machine"`
	Applied uint64 `json:"applied"`
}

// ConfirmResponse is the leader's answer: its commit index taken after the
// request arrived, the term in which a quorum then confirmed its leadership,
// and its cluster time (Unix ms) once confirmed.
type ConfirmResponse struct {
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	Now   int64  `json:"now"`
}
