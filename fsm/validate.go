package fsm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/elanous/elanous-node/wire"
)

// The rules themselves (name patterns, size limits) are the protocol's and
// live in package wire; this file applies them to commands and wraps their
// findings in ErrInvalidCommand, so a replica refuses exactly what the API
// refuses.

// ValidateResourceID refuses an empty, over-long or control-character id.
func ValidateResourceID(id string) error { return invalid(wire.CheckResourceID(id)) }

// ValidateAttrs refuses attrs that are not valid JSON or are larger than
// wire.MaxAttrsBytes once encoded (see wire.CheckAttrs).
func ValidateAttrs(attrs map[string]json.RawMessage) error { return invalid(wire.CheckAttrs(attrs)) }

// invalid wraps a rule's finding in ErrInvalidCommand.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrInvalidCommand, err)
}

// Validate checks a RegisterResource as the API receives it.
func (c RegisterResource) Validate() error {
	if err := ValidateResourceID(c.ID); err != nil {
		return err
	}
	if !wire.ValidKind(c.Kind) {
		return fmt.Errorf("%w: kind must match %s", ErrInvalidCommand, wire.KindPatternText)
	}
	if err := invalid(wire.CheckText("name", c.Name, wire.MaxNameLen, true)); err != nil {
		return err
	}
	if !wire.ValidMachine(c.Machine) {
		return fmt.Errorf("%w: machine %q is not a valid machine name", ErrInvalidCommand, c.Machine)
	}
	if err := invalid(wire.CheckText("endpoint", c.Endpoint, wire.MaxEndpointLen, false)); err != nil {
		return err
	}
	if c.TTLMs <= 0 || c.TTLMs > wire.MaxResourceTTLMs {
		return fmt.Errorf("%w: ttlMs must be between 1 and %d", ErrInvalidCommand, wire.MaxResourceTTLMs)
	}
	if c.ObservedAt < 0 {
		return fmt.Errorf("%w: observedAt must not be negative", ErrInvalidCommand)
	}
	return ValidateAttrs(c.Attrs)
}

// Validate checks a HeartbeatResource.
func (c HeartbeatResource) Validate() error {
	if err := ValidateResourceID(c.ID); err != nil {
		return err
	}
	return ValidateAttrs(c.Attrs)
}

// Validate checks an AcquireLease; failures wrap ErrInvalidPortLease.
func (c AcquireLease) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidPortLease}, args...)...)
	}
	if strings.TrimSpace(c.Machine) == "" || !wire.ValidMachine(c.Machine) {
		return bad("machine %q is not a valid machine name", c.Machine)
	}
	if strings.TrimSpace(c.Purpose) == "" || wire.CheckText("purpose", c.Purpose, wire.MaxPurposeLen, true) != nil {
		return bad("purpose must be non-empty text of at most %d bytes", wire.MaxPurposeLen)
	}
	if c.TTLMs <= 0 {
		return bad("ttlMs must be positive")
	}
	if !wire.ValidPort(c.BandStart) || !wire.ValidPort(c.BandEnd) || c.BandEnd < c.BandStart {
		return bad("band %d-%d is not valid", c.BandStart, c.BandEnd)
	}
	for _, p := range c.Excluded {
		if p < c.BandStart || p > c.BandEnd {
			return bad("excluded port %d is outside the test band %d-%d", p, c.BandStart, c.BandEnd)
		}
	}
	if c.LeaseID == "" || len(c.LeaseID) > wire.MaxLeaseIDLen {
		return bad("leaseId is missing")
	}
	if len(c.IdempotencyKey) > wire.MaxIdempotencyKey {
		return bad("idempotency key is longer than %d bytes", wire.MaxIdempotencyKey)
	}
	return nil
}
