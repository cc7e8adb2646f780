package fsm

import "encoding/json"

// Resource is a registered machine or instance. Attrs is never mutated once a
// record is stored (updates build a new map), so copies may share it.
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
	numTables
)

// Counts sums the tables.
type Counts struct {
	Resources int `json:"resources"`
	Leases    int `json:"leases"`
	Tokens    int `json:"tokens"`
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
