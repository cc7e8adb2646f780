package fsm

import (
	"bytes"
	"fmt"
)

// Renewal is the judgment of a heartbeat or a lease renewal against the
// applied state (JudgeRenewal).
type Renewal struct {
	// Covered tells that the state already holds the promise the renewal
	// asks for: the record is live, the caller may renew it, nothing it sends
	// would change it, and it expires no earlier than now + TTL. The renewal
	// is then answered with Value and needs no log entry.
	Covered bool
	// Value is the record as stored (a Resource or a PortLease) when Covered.
	Value any
	// TTLMs is the record's TTL: the leader derives the slack of a renewal
	// it proposes from it.
	TTLMs int64
}

// JudgeRenewal judges a HeartbeatResource or RenewLease at the cluster time
// now against this replica's applied state, as Apply would see it, without
// changing anything (ARCHITECTURE.md, "Renewals"). It returns the error Apply
// would return for a renewal it refuses (ErrNotFound, ErrForbidden,
// ErrLeaseMismatch, ErrTokenRevoked, ErrInvalidCommand); otherwise a Renewal
// whose Covered tells whether the state already covers it.
//
// Only a caller that has confirmed the state is current (a ReadIndex round
// after the renewal arrived) may answer from it; package cluster does. A
// renewal that is not covered must be proposed (with a slack, WithSlack).
// Other command types return an error wrapping ErrInvalidCommand. Safe for
// concurrent use.
func (f *FSM) JudgeRenewal(cmd Command, now int64) (Renewal, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := applier{table: commandTable, st: f.st, now: max(now, f.st.lastNow)}
	if err := a.authorized(cmd); err != nil {
		return Renewal{}, err
	}
	switch c := cmd.(type) {
	case HeartbeatResource:
		if err := c.Validate(); err != nil {
			return Renewal{}, err
		}
		r, err := a.liveResource(c.ID, c.Caller)
		if err != nil {
			return Renewal{}, err
		}
		if !sameAttrs(r, c) || r.expiresAt < a.now+r.ttlMs {
			return Renewal{TTLMs: r.ttlMs}, nil
		}
		return Renewal{Covered: true, Value: r.resource(), TTLMs: r.ttlMs}, nil
	case RenewLease:
		c.Caller.Admin = false // renewal is the owner's alone, as in Apply
		l, err := a.heldLease(c.Port, c.LeaseID, c.Caller)
		if err != nil {
			return Renewal{}, err
		}
		if l.ExpiresAt < a.now+l.TTLMs {
			return Renewal{TTLMs: l.TTLMs}, nil
		}
		return Renewal{Covered: true, Value: l, TTLMs: l.TTLMs}, nil
	}
	return Renewal{}, fmt.Errorf("%w: %T is not a renewal", ErrInvalidCommand, cmd)
}

// sameAttrs reports whether merging the heartbeat's attrs into r changes
// nothing: every attr it sends is stored with the same bytes. A value equal
// in meaning but not in bytes counts as a change (the heartbeat is then a
// write, which is always correct).
func sameAttrs(r *record, c HeartbeatResource) bool {
	if len(c.Attrs) == 0 {
		return true
	}
	stored := decodeAttrs(r.attrs())
	for k, v := range c.Attrs {
		old, ok := stored[k]
		if !ok || !bytes.Equal(old, v) {
			return false
		}
	}
	return true
}

// WithSlack returns a renewal command carrying the slack slackMs: the leader
// sets it on every renewal it proposes once the cluster is at format 3. Any
// other command is returned unchanged.
func WithSlack(cmd Command, slackMs int64) Command {
	switch c := cmd.(type) {
	case HeartbeatResource:
		c.SlackMs = slackMs
		return c
	case RenewLease:
		c.SlackMs = slackMs
		return c
	}
	return cmd
}

// IsRenewal reports whether cmd is a command JudgeRenewal judges.
func IsRenewal(cmd Command) bool {
	switch cmd.(type) {
	case HeartbeatResource, RenewLease:
		return true
	}
	return false
}
