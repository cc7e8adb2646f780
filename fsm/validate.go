package fsm

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits shared with the API layer.
const (
	MaxMachineLen   = 253
	MaxIDLen        = 512
	MaxNameLen      = 253
	MaxPurposeLen   = 256
	MaxEndpointLen  = 2048
	MaxLeaseIDLen   = 128
	MaxAttrsBytes   = 16 << 10
	MaxLeaseTTLMs   = 24 * 3600 * 1000
	MaxResourceTTL  = 24 * 3600 * 1000
	MaxIdempotency  = 128
	DefaultBandLow  = 31450
	DefaultBandHigh = 31499
)

var (
	machinePattern   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)
	candidatePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	kindPattern      = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	sha256Pattern    = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// ValidMachine reports whether name is an acceptable machine name:
// ^[a-zA-Z0-9][a-zA-Z0-9._-]*$, at most 253 characters, and none of the
// names JavaScript clients treat specially.
func ValidMachine(name string) bool {
	switch name {
	case "__proto__", "constructor", "prototype":
		return false
	}
	return len(name) <= MaxMachineLen && machinePattern.MatchString(name)
}

// ValidCandidate reports whether name is an acceptable candidate name.
func ValidCandidate(name string) bool { return candidatePattern.MatchString(name) }

// ValidSHA256 reports whether s is 64 lowercase hex characters.
func ValidSHA256(s string) bool { return sha256Pattern.MatchString(s) }

// checkText refuses an empty, over-long, non-UTF-8 or control-character string.
func checkText(field, s string, max int, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("%w: %s is required", ErrInvalidCommand, field)
		}
		return nil
	}
	if len(s) > max {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidCommand, field, max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidCommand, field)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%w: %s contains a control character", ErrInvalidCommand, field)
	}
	return nil
}

// ValidateResourceID refuses an empty, over-long or control-character id.
func ValidateResourceID(id string) error { return checkText("id", id, MaxIDLen, true) }

// ValidateAttrs refuses attrs whose values are not valid JSON or whose JSON
// encoding (compact, keys sorted, no HTML escaping — the same measure whether
// the API checks a request or Apply checks a decoded entry) is longer than
// MaxAttrsBytes. Keys are checked in sorted order so every replica reports
// the same error.
func ValidateAttrs(attrs map[string]json.RawMessage) error {
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if !json.Valid(attrs[k]) {
			return fmt.Errorf("%w: attrs.%s is not valid JSON", ErrInvalidCommand, k)
		}
	}
	if len(attrs) == 0 {
		return nil
	}
	data, err := marshalJSON(attrs)
	if err != nil {
		return fmt.Errorf("%w: attrs: %v", ErrInvalidCommand, err)
	}
	if len(data) > MaxAttrsBytes {
		return fmt.Errorf("%w: attrs are larger than %d bytes", ErrInvalidCommand, MaxAttrsBytes)
	}
	return nil
}

// Validate checks a RegisterResource as the API receives it.
func (c RegisterResource) Validate() error {
	if err := ValidateResourceID(c.ID); err != nil {
		return err
	}
	if !kindPattern.MatchString(c.Kind) {
		return fmt.Errorf("%w: kind must match %s", ErrInvalidCommand, kindPattern)
	}
	if err := checkText("name", c.Name, MaxNameLen, true); err != nil {
		return err
	}
	if !ValidMachine(c.Machine) {
		return fmt.Errorf("%w: machine %q is not a valid machine name", ErrInvalidCommand, c.Machine)
	}
	if err := checkText("endpoint", c.Endpoint, MaxEndpointLen, false); err != nil {
		return err
	}
	if c.TTLMs <= 0 || c.TTLMs > MaxResourceTTL {
		return fmt.Errorf("%w: ttlMs must be between 1 and %d", ErrInvalidCommand, MaxResourceTTL)
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
	if strings.TrimSpace(c.Machine) == "" || !ValidMachine(c.Machine) {
		return bad("machine %q is not a valid machine name", c.Machine)
	}
	if strings.TrimSpace(c.Purpose) == "" || checkText("purpose", c.Purpose, MaxPurposeLen, true) != nil {
		return bad("purpose must be non-empty text of at most %d bytes", MaxPurposeLen)
	}
	if c.TTLMs <= 0 {
		return bad("ttlMs must be positive")
	}
	if c.BandStart <= 0 || c.BandEnd < c.BandStart || c.BandEnd > 65535 {
		return bad("band %d-%d is not valid", c.BandStart, c.BandEnd)
	}
	for _, p := range c.Excluded {
		if p < c.BandStart || p > c.BandEnd {
			return bad("excluded port %d is outside the test band %d-%d", p, c.BandStart, c.BandEnd)
		}
	}
	if c.LeaseID == "" || len(c.LeaseID) > MaxLeaseIDLen {
		return bad("leaseId is missing")
	}
	if len(c.IdempotencyKey) > MaxIdempotency {
		return bad("idempotency key is longer than %d bytes", MaxIdempotency)
	}
	return nil
}
