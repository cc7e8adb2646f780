package fsm

import "fmt"

// commandSpec is everything the FSM knows about one command type: its name,
// how its body decodes, how the leader stamps its time, how it applies and
// whether a Batch may hold it.
// The table below is the only place a type is registered; Decode, Encode,
// Stamp and Apply all go through it, and TestCommandTable walks it.
type commandSpec struct {
	// name is the type's stable name, used in fixtures and messages.
	name string
	// decode parses a body (the entry without its type byte).
	decode func(body []byte) (Command, error)
	// stamp returns the command with Header.Now set.
	stamp func(cmd Command, now int64) Command
	// apply applies the command at a.now and returns its result or error.
	apply func(a *applier, cmd Command) any
	// ownClock marks a command that sets the cluster time itself instead of
	// having its Now clamped to at least lastNow (only a claim).
	ownClock bool
	// inBatch tells whether a Batch may hold the type (NewBatch and Apply
	// both ask batchable, which reads it).
	inBatch bool
}

// batching is the decision every table entry makes: may a Batch hold the
// type? It is an argument of define rather than an optional marker like
// ownClock, so a new type cannot be registered without the decision: a type
// let into batches by omission would be applied among other commands at one
// index. The answer is part of the released format: a replica refuses a type
// it does not allow inside a batch, so changing it would change what an
// existing log computes.
type batching bool

const (
	// batched: a replica applies the command inside a Batch (ARCHITECTURE.md
	// §2, group commit). The marker says what Apply accepts, not what a
	// leader proposes: an acquire is batched, at most one per batch (its
	// fence is the entry's index; NewBatch and Apply enforce it), and
	// cluster.Node.Propose sends every acquire as an entry of its own. The
	// marker stays: it is part of the released format.
	batched batching = true
	// alone: a Batch never holds the command. Claims and sweeps drive the
	// time model, a batch wraps the others, and format, directory and limits
	// changes are proposed on their own.
	alone batching = false
)

// define builds the spec of command type T from its apply method.
func define[T Command, P interface {
	*T
	setNow(int64)
}](name string, b batching, apply func(*applier, T) any) commandSpec {
	return commandSpec{
		name:    name,
		inBatch: bool(b),
		decode: func(body []byte) (Command, error) {
			v, err := decodeBody[T](body)
			if err != nil {
				return nil, err
			}
			return v, nil
		},
		stamp: func(cmd Command, now int64) Command {
			v := cmd.(T)
			P(&v).setNow(now)
			return v
		},
		apply: func(a *applier, cmd Command) any { return apply(a, cmd.(T)) },
	}
}

// commandTable maps every type number to its spec. Type numbers are
// append-only and a number's meaning never changes once released
// (ARCHITECTURE.md, "Versioned formats"): a new meaning is a new number.
var commandTable = map[CommandType]commandSpec{
	RegisterResourceType:  define("register-resource", batched, (*applier).register),
	HeartbeatResourceType: define("heartbeat-resource", batched, (*applier).heartbeat),
	DeleteResourceType:    define("delete-resource", batched, (*applier).deleteResource),
	AcquireLeaseType:      define("acquire-lease", batched, (*applier).acquire),
	RenewLeaseType:        define("renew-lease", batched, (*applier).renew),
	ReleaseLeaseType:      define("release-lease", batched, (*applier).release),
	IssueTokenType:        define("issue-token", batched, (*applier).issueToken),
	RevokeTokenType:       define("revoke-token", batched, (*applier).revokeToken),
	ClaimPrimaryType:      ownClock(define("claim-primary", alone, (*applier).claim)),
	SweepType:             define("sweep", alone, (*applier).sweep),
	BatchType:             define("batch", alone, (*applier).batch),
	SetFormatType:         define("set-format", alone, (*applier).setFormat),
	PutCandidateType:      define("put-candidate", alone, (*applier).putCandidate),
	RemoveCandidateType:   define("remove-candidate", alone, (*applier).removeCandidate),
	SetLimitsType:         define("set-limits", alone, (*applier).setLimits),
}

// ownClock marks a spec whose apply function sets the cluster time itself: a
// claim, which may move it back.
func ownClock(s commandSpec) commandSpec {
	s.ownClock = true
	return s
}

// Stamp returns cmd with its time set to now (Unix ms). Only the leader calls
// it, just before proposing: it is the one place cluster time enters the log.
// It panics on a type missing from the table, which is a programming error
// that TestCommandTable catches.
func Stamp(cmd Command, now int64) Command {
	sp, ok := commandTable[cmd.Type()]
	if !ok {
		panic(fmt.Sprintf("fsm: Stamp of command type %d, which is not in the command table", cmd.Type()))
	}
	return sp.stamp(cmd, now)
}
