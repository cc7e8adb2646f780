package fsm

import (
	"errors"
	"fmt"
)

// Errors returned by Apply (and so by cluster.Propose) as domain outcomes. They
// change no record (only the cluster time LastNow moves, see Apply). The api
// package maps them to HTTP statuses.
var (
	// ErrInvalidCommand is returned when a command body does not decode or a
	// field fails validation (bad machine name, ttl out of range, port outside
	// the band). Maps to 400.
	ErrInvalidCommand = errors.New("invalid command")
	// ErrInvalidPortLease is returned by AcquireLease for a bad request: empty
	// machine or purpose, ttlMs <= 0, an excluded port outside the test band.
	// It wraps ErrInvalidCommand. Maps to 400 invalid-port-lease.
	ErrInvalidPortLease = fmt.Errorf("invalid port lease: %w", ErrInvalidCommand)
	// ErrNotFound is returned when the resource, lease or token does not exist
	// or has expired (expiresAt <= now). Maps to 404.
	ErrNotFound = errors.New("not found")
	// ErrForbidden is returned when the caller's machine or owner does not
	// match the record's. Maps to 403.
	ErrForbidden = errors.New("forbidden")
	// ErrLeaseMismatch is returned when a port is held under another lease id
	// than the one presented. Maps to 409 lease-mismatch.
	ErrLeaseMismatch = errors.New("port is held under another lease id")
	// ErrIdempotencyKeyUsed is returned by AcquireLease when the caller's
	// Idempotency-Key already created a lease that has since been released
	// or has expired: a late duplicate of an answered request must not grant
	// a second lease. Maps to 409 idempotency-key-used.
	ErrIdempotencyKeyUsed = errors.New("idempotency key already used by a lease that has ended")
	// ErrBandExhausted is returned by AcquireLease when every port of the band
	// is leased or excluded. Maps to 409 port-band-exhausted.
	ErrBandExhausted = errors.New("port band exhausted")
	// ErrQuotaExceeded is returned (format 2) by a register or an acquire
	// that would pass one of the cluster's Limits; the message names the
	// limit. Maps to 429 quota-exceeded.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrTokenRevoked is returned (format 2) by a command whose machine token
	// was revoked or re-issued after the API authenticated it and before the
	// command was applied. Maps to 401.
	ErrTokenRevoked = errors.New("the machine token was revoked or re-issued")
)
