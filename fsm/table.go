package fsm

import "fmt"

// commandSpec is everything the FSM knows about one command type: its name,
// how its body decodes, how the leader stamps its time and how it applies.
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
}

// define builds the spec of command type T from its apply method.
func define[T Command, P interface {
	*T
	setNow(int64)
}](name string, apply func(*applier, T) any) commandSpec {
	return commandSpec{
		name: name,
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
	RegisterResourceType:  define("register-resource", (*applier).register),
	HeartbeatResourceType: define("heartbeat-resource", (*applier).heartbeat),
	DeleteResourceType:    define("delete-resource", (*applier).deleteResource),
	AcquireLeaseType:      define("acquire-lease", (*applier).acquire),
	RenewLeaseType:        define("renew-lease", (*applier).renew),
	ReleaseLeaseType:      define("release-lease", (*applier).release),
	IssueTokenType:        define("issue-token", (*applier).issueToken),
	RevokeTokenType:       define("revoke-token", (*applier).revokeToken),
	ClaimPrimaryType:      ownClock(define("claim-primary", (*applier).claim)),
	SweepType:             define("sweep", (*applier).sweep),
	BatchType:             define("batch", (*applier).batch),
	SetFormatType:         define("set-format", (*applier).setFormat),
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

// TypeName returns the registered name of type t, or "" when t is unknown.
func TypeName(t CommandType) string { return commandTable[t].name }
