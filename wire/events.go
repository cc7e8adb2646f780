package wire

// GET /v1/events is a Server-Sent Events stream (docs/events.md): each
// message's id is the Raft index of the change, its event one of the
// Event* names, its data one line of the matching JSON below.

// Event names of GET /v1/events.
const (
	EventHello     = "hello"
	EventReset     = "reset"
	EventResource  = "resource"
	EventLease     = "lease"
	EventToken     = "token"
	EventPrimary   = "primary"
	EventCandidate = "candidate"
	EventLimits    = "limits"
	EventTimeline  = "timeline"
)

// Reasons of a reset event.
const (
	ResetTooFarBehind     = "too-far-behind"
	ResetSlowConsumer     = "slow-consumer"
	ResetSnapshotRestored = "snapshot-restored"
)

// EventHelloData opens every stream. Index is the index the stream
// continues after (also the message's id).
type EventHelloData struct {
	Node    string `json:"node"`
	Index   uint64 `json:"index"`
	Applied uint64 `json:"applied"`
	Floor   uint64 `json:"floor"`
	Format  int    `json:"format"`
}

// EventResetData tells the client to re-read the state; the stream goes on
// after Index.
type EventResetData struct {
	Index  uint64 `json:"index"`
	Floor  uint64 `json:"floor"`
	Reason string `json:"reason"`
}

// EventResourceData is a resource's change: op put (with the record after
// the change) or delete (with reason deleted or expired).
type EventResourceData struct {
	Index    uint64    `json:"index"`
	Time     int64     `json:"time"`
	Op       string    `json:"op"`
	ID       string    `json:"id"`
	Resource *Resource `json:"resource,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// EventLeaseData is a port lease's change: op put (with the lease after the
// change) or delete (with reason released or expired).
type EventLeaseData struct {
	Index  uint64     `json:"index"`
	Time   int64      `json:"time"`
	Op     string     `json:"op"`
	Port   int        `json:"port"`
	Lease  *PortLease `json:"lease,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// EventTokenData is a machine token's change: op put (issued, with its issue
// time) or delete (revoked). It never holds a token or a hash.
type EventTokenData struct {
	Index    uint64 `json:"index"`
	Time     int64  `json:"time"`
	Op       string `json:"op"`
	Machine  string `json:"machine"`
	IssuedAt string `json:"issuedAt,omitempty"`
}

// EventPrimaryData is a claim: the new primary and how it rebased every TTL.
type EventPrimaryData struct {
	Index      uint64      `json:"index"`
	Time       int64       `json:"time"`
	Holder     string      `json:"holder"`
	Generation uint64      `json:"generation"`
	ClaimedAt  int64       `json:"claimedAt"`
	Rebase     EventRebase `json:"rebase"`
}

// EventRebase is a claim's TTL rule: an expiresAt above FromNow becomes
// claimedAt + (expiresAt − FromNow) + GraceMs, any other claimedAt.
type EventRebase struct {
	FromNow int64 `json:"fromNow"`
	GraceMs int64 `json:"graceMs"`
}

// EventCandidateData is a change of the candidate directory: op put (with
// the entry) or delete.
type EventCandidateData struct {
	Index     uint64          `json:"index"`
	Time      int64           `json:"time"`
	Op        string          `json:"op"`
	Machine   string          `json:"machine"`
	Candidate *CandidateEntry `json:"candidate,omitempty"`
}

// CandidateEntry is an entry of the replicated candidate directory.
type CandidateEntry struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
	Raft    string `json:"raft"`
	Voter   bool   `json:"voter"`
	AddedAt int64  `json:"addedAt"`
}

// EventLimitsData carries the limits in force after a change.
type EventLimitsData struct {
	Index  uint64 `json:"index"`
	Time   int64  `json:"time"`
	Limits Limits `json:"limits"`
}

// EventTimelineData carries an entry appended to the timeline.
type EventTimelineData struct {
	Index uint64        `json:"index"`
	Time  int64         `json:"time"`
	Entry TimelineEntry `json:"entry"`
}

// Timeline answers GET /v1/cluster/timeline: the last 100 primary and
// membership changes, oldest first (empty below format level 4).
type Timeline struct {
	Format  int             `json:"format"`
	Index   uint64          `json:"index"`
	Entries []TimelineEntry `json:"entries"`
}

// TimelineEntry is one change of the timeline. Kind primary has Generation
// and Holder; the candidate-* kinds have Machine and Voter.
type TimelineEntry struct {
	Index      uint64 `json:"index"`
	Time       int64  `json:"time"`
	Kind       string `json:"kind"`
	Generation uint64 `json:"generation,omitempty"`
	Holder     string `json:"holder,omitempty"`
	Machine    string `json:"machine,omitempty"`
	Voter      *bool  `json:"voter,omitempty"`
}
