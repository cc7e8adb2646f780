package fsm

import "encoding/json"

// Resource is a registered machine or instance, as commands return it and the
// snapshot document holds it. The state stores each as a compact record
// (record.go); every Resource the FSM hands out has an Attrs map of its own.
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

// PortLease is a port of the test band held by one owner under a TTL.
// Fence is the grant's log index (strictly increasing cluster-wide) and
// Generation the grant's term.
type PortLease struct {
	ID             string `json:"id"`
	Port           int    `json:"port"`
	LeaseID        string `json:"leaseId"`
	Machine        string `json:"machine"`
	Purpose        string `json:"purpose"`
	Owner          string `json:"owner"`
	TTLMs          int64  `json:"ttlMs"`
	GrantedAt      int64  `json:"grantedAt"`
	RenewedAt      int64  `json:"renewedAt"`
	ExpiresAt      int64  `json:"expiresAt"`
	Generation     uint64 `json:"generation"`
	Fence          uint64 `json:"fence"`
	IdempotencyKey string `json:"-"`
}

// MemberToken is the stored form of a machine token: its SHA-256, never the token.
type MemberToken struct {
	Machine  string `json:"machine"`
	SHA256   string `json:"sha256"`
	IssuedAt string `json:"issuedAt"`
}

// Primary is the claim of the current leader. Generation is the term of the
// entry that carried the claim; Index is its log index.
type Primary struct {
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	ClaimedAt  int64  `json:"claimedAt"`
	Index      uint64 `json:"index"`
}

// SweepResult tells how many records a Sweep expired.
type SweepResult struct {
	Resources []string `json:"resources"`
	Leases    []int    `json:"leases"`
}

// Table names a part of the state that blocking queries watch.
type Table int

// Tables. Each has its own change index.
const (
	TableResources Table = iota
	TableLeases
	TableTokens
	TablePrimary
	TableCandidates // format 2
	numTables
)

// tablesAt is how many tables a snapshot of format level f records indexes
// for: the candidate directory came with format 2.
func tablesAt(format int) int {
	if format < 2 {
		return int(TableCandidates)
	}
	return int(numTables)
}

// Counts sums the tables.
type Counts struct {
	Resources  int `json:"resources"`
	Leases     int `json:"leases"`
	Tokens     int `json:"tokens"`
	Candidates int `json:"candidates"`
}

// Candidate is an entry of the replicated candidate directory (format 2): a
// server of the cluster, how members and peers reach it, and whether it votes.
// The directory follows the Raft configuration (package cluster keeps them
// in step) so that every node forwards to, and /v1/primary answers with, the
// current servers without a configuration edit.
type Candidate struct {
	Machine string `json:"machine"`
	URL     string `json:"url"`
	Raft    string `json:"raft"`
	Voter   bool   `json:"voter"`
	AddedAt int64  `json:"addedAt"`
}

// Limits are the cluster's abuse limits, replicated so that every replica
// refuses exactly the same commands (format 2). A zero field takes its
// default (see EffectiveLimits).
type Limits struct {
	// ResourcesPerMachine bounds the resources whose machine is one name.
	ResourcesPerMachine int `json:"resourcesPerMachine,omitempty"`
	// LeasesPerMachine bounds the port leases one machine holds; 0 means a
	// quarter of the band an acquire draws from.
	LeasesPerMachine int `json:"leasesPerMachine,omitempty"`
	// Resources bounds the resources of the whole cluster.
	Resources int `json:"resources,omitempty"`
	// IdempotencyKeys bounds the remembered Idempotency-Keys; past it the
	// oldest are forgotten first.
	IdempotencyKeys int `json:"idempotencyKeys,omitempty"`
}

// Default limits: far above what a fleet of 10,000 members needs (each
// registers a machine and an instance or two and holds a few leases), far
// below what would exhaust a replica's memory.
const (
	DefaultResourcesPerMachine = 1024
	DefaultResources           = 250_000
	DefaultIdempotencyKeys     = 100_000
)

// EffectiveLimits returns l with every zero field at its default; a zero
// LeasesPerMachine stays zero (a quarter of the band, decided per acquire).
func (l Limits) EffectiveLimits() Limits {
	if l.ResourcesPerMachine == 0 {
		l.ResourcesPerMachine = DefaultResourcesPerMachine
	}
	if l.Resources == 0 {
		l.Resources = DefaultResources
	}
	if l.IdempotencyKeys == 0 {
		l.IdempotencyKeys = DefaultIdempotencyKeys
	}
	return l
}

// leasesPerMachine is the lease limit for an acquire from [start, end].
func (l Limits) leasesPerMachine(start, end int) int {
	if l.LeasesPerMachine > 0 {
		return l.LeasesPerMachine
	}
	return max(1, (end-start+1)/4)
}

// IdempotencyRetentionMs is how long an acquire's Idempotency-Key is
// remembered after the grant, live lease or not. A retried or duplicated
// request arrives within seconds; ten minutes is ample.
const IdempotencyRetentionMs = 10 * 60 * 1000

// idemRecord remembers which lease an Idempotency-Key created.
type idemRecord struct {
	Key     string `json:"key"` // owner + "/" + Idempotency-Key
	Port    int    `json:"port"`
	LeaseID string `json:"leaseId"`
	Until   int64  `json:"until"` // forgotten by the first Sweep at or after this time
}

func idemKey(owner, key string) string { return owner + "/" + key }
