package check

import (
	"fmt"
	"sort"

	"github.com/elanous/elanous-node/wire"
)

// Kind names what an operation did.
type Kind string

// Operation kinds recorded by the workload.
const (
	LeaseAcquire Kind = "lease-acquire" // POST /v1/leases/port
	LeaseRenew   Kind = "lease-renew"   // POST /v1/leases/port/{port}/heartbeat
	LeaseRelease Kind = "lease-release" // DELETE /v1/leases/port/{port}
	LeaseRead    Kind = "lease-read"    // GET /v1/leases/port?consistent=true
	ResRegister  Kind = "res-register"  // POST /v1/resources/register
	ResHeartbeat Kind = "res-heartbeat" // POST /v1/resources/{id}/heartbeat
	ResDelete    Kind = "res-delete"    // DELETE /v1/resources/{id}
	ResRead      Kind = "res-read"      // GET /v1/resources?consistent=true
	PrimaryPoll  Kind = "primary"       // GET /v1/primary

	// A renewal member's own record (RenewerID), kept out of the resource
	// model: its TTL is short, and the model has no clock.
	RenewRegister  Kind = "renew-register"  // POST /v1/resources/register
	RenewHeartbeat Kind = "renew-heartbeat" // POST /v1/resources/{id}/heartbeat
)

// IsWrite reports whether an operation of kind k changes replicated state.
func (k Kind) IsWrite() bool {
	switch k {
	case LeaseAcquire, LeaseRenew, LeaseRelease, ResRegister, ResHeartbeat, ResDelete, RenewRegister, RenewHeartbeat:
		return true
	}
	return false
}

// Outcome is what the client knows about an operation's effect.
type Outcome int

// Outcomes of an operation.
const (
	// OK: the server answered with the operation's success status.
	OK Outcome = iota
	// Failed: the server answered with a definite refusal (4xx, or a 503
	// no-leader/not-ready, which the server sends only before proposing).
	Failed
	// Indeterminate: the operation may or may not have taken effect (timeout,
	// connection error after sending, 503 outcome-unknown, 500).
	Indeterminate
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Indeterminate:
		return "indeterminate"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Op is one recorded client operation. Call and Return are nanoseconds on the
// harness's monotonic clock; one client's operations never overlap.
type Op struct {
	Client  int
	Kind    Kind
	Node    string // the node the request was sent to
	Epoch   int    // that node's process incarnation when the request was sent
	Call    int64
	Return  int64
	Outcome Outcome
	Status  int    // HTTP status, 0 when none was received
	Code    string // the "error" field of an error body

	// Lease operations.
	Port    int    // target port (renew, release) or granted port (acquire)
	LeaseID string // lease id sent (renew, release) or granted (acquire)
	Purpose string // unique per acquire: identifies an indeterminate grant in later reads
	TTLMs   int64
	Short   bool // the lease's TTL is short enough to expire during a run
	Leases  []wire.PortLease

	// Resource operations.
	ResID     string
	Value     string // the attr value written (register "w", heartbeat "hb")
	Resources []wire.Resource

	// ExpiresAt is the expiresAt an acknowledged grant, register, heartbeat
	// or lease renewal answered (Unix ms at the answering leader's cluster
	// time; 0 when none). Wrote tells that the answer carried
	// X-Elanous-Index: the renewal was written, not answered from confirmed
	// state. Renewer marks a renewal member's operation.
	ExpiresAt int64 `json:",omitempty"`
	Wrote     bool  `json:",omitempty"`
	Renewer   bool  `json:",omitempty"`

	// Generation observed: a grant's generation, a consistent read's
	// X-Elanous-Generation, or /v1/primary's generation when Known.
	Generation uint64
	Known      bool
	Holder     string // /v1/primary's holder
}

func (o Op) String() string {
	s := fmt.Sprintf("c%d %s@%s", o.Client, o.Kind, o.Node)
	switch o.Kind {
	case LeaseAcquire, LeaseRenew, LeaseRelease:
		s += fmt.Sprintf(" port=%d lease=%s", o.Port, short(o.LeaseID))
	case ResRegister, ResHeartbeat, ResDelete, RenewRegister, RenewHeartbeat:
		s += fmt.Sprintf(" id=%s v=%s", o.ResID, o.Value)
	}
	return s + fmt.Sprintf(" -> %s %d %s", o.Outcome, o.Status, o.Code)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Attribute names the workload writes into resources.
const (
	AttrWrite     = "w"  // set by register
	AttrHeartbeat = "hb" // set by heartbeat
)

// RenewerIDPrefix starts the ids of the renewal members' records
// (RenewerID); the resource model leaves them out.
const RenewerIDPrefix = "instance:chaos-renew-"

// RenewerID is renewal member i's record, and RenewerMachine its machine.
func RenewerID(i int) string { return fmt.Sprintf("%s%d/1", RenewerIDPrefix, i) }

// RenewerMachine is the machine renewal member i registers and leases for.
func RenewerMachine(i int) string { return fmt.Sprintf("chaos-renew-%d", i) }

// Infinity is the return time of an indeterminate operation: porcupine may
// linearize it at any point after its call, including never.
const Infinity = int64(^uint64(0) >> 1)

func sortByCall(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
}
