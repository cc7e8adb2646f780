package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The protocol's rules: every name pattern, size limit and address rule of
// the API is defined here once, and the server (api, fsm), the configuration
// (config) and the clients (member, the CLI) all check against these.

// Limits of the protocol.
const (
	MaxBodyBytes      = 64 << 10         // a request body larger than this is refused with 413
	MaxAttrsBytes     = 16 << 10         // encoded attrs larger than this are refused with 400
	MaxLeaseTTLMs     = 24 * 3600 * 1000 // a longer lease TTL is capped to this
	MaxResourceTTLMs  = 24 * 3600 * 1000 // a resource TTL must be 1 ms up to this
	MaxMachineLen     = 253              // machine names
	MaxIDLen          = 512              // resource ids
	MaxNameLen        = 253              // resource names
	MaxPurposeLen     = 256              // lease purposes
	MaxEndpointLen    = 2048             // instance endpoints
	MaxLeaseIDLen     = 128              // the x-port-lease-id header
	MaxIdempotencyKey = 128              // the Idempotency-Key header
	DefaultBandStart  = 31450            // the default test band leases are drawn from
	DefaultBandEnd    = 31499
	MaxPort           = 65535 // ports are 1 up to this (0 is "any" to a listener, never an address)
)

// Patterns as text, for messages and help. The matchers below are compiled
// from these, so a message always names the pattern that is checked.
const (
	MachinePatternText   = `^[a-zA-Z0-9][a-zA-Z0-9._-]*$`
	CandidatePatternText = `^[a-z0-9][a-z0-9-]{0,31}$`
	KindPatternText      = `^[a-z][a-z0-9-]{0,31}$`
)

var (
	machinePattern   = regexp.MustCompile(MachinePatternText)
	candidatePattern = regexp.MustCompile(CandidatePatternText)
	kindPattern      = regexp.MustCompile(KindPatternText)
	hex64Pattern     = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// ValidMachine reports whether name is an acceptable machine name: it matches
// ^[a-zA-Z0-9][a-zA-Z0-9._-]*$, is at most 253 characters and is none of the
// names JavaScript clients treat specially (__proto__, constructor, prototype).
func ValidMachine(name string) bool {
	switch name {
	case "__proto__", "constructor", "prototype":
		return false
	}
	return len(name) <= MaxMachineLen && machinePattern.MatchString(name)
}

// ValidCandidate reports whether name is an acceptable candidate name (a
// node.id, a Raft server ID): ^[a-z0-9][a-z0-9-]{0,31}$.
func ValidCandidate(name string) bool { return candidatePattern.MatchString(name) }

// ValidKind reports whether kind is an acceptable resource kind.
func ValidKind(kind string) bool { return kindPattern.MatchString(kind) }

// ValidToken reports whether s has the form of a bearer token: 64 lowercase
// hex characters.
func ValidToken(s string) bool { return hex64Pattern.MatchString(s) }

// ValidSHA256 reports whether s is a SHA-256 in lowercase hex (the stored
// form of a machine token).
func ValidSHA256(s string) bool { return hex64Pattern.MatchString(s) }

// CheckText refuses an empty (when required), over-long, non-UTF-8 or
// control-character string; field names it in the message.
func CheckText(field, s string, maxLen int, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("%s is required", field)
		}
		return nil
	}
	if len(s) > maxLen {
		return fmt.Errorf("%s is longer than %d bytes", field, maxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s contains a control character", field)
	}
	return nil
}

// CheckResourceID refuses an empty, over-long or control-character id.
func CheckResourceID(id string) error { return CheckText("id", id, MaxIDLen, true) }

// CheckAttrs refuses attrs whose values are not valid JSON or whose JSON
// encoding (compact, keys sorted, no HTML escaping) is longer than
// MaxAttrsBytes. Keys are checked in sorted order, so every replica and every
// client reports the same first problem.
func CheckAttrs(attrs map[string]json.RawMessage) error {
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if !json.Valid(attrs[k]) {
			return fmt.Errorf("attrs.%s is not valid JSON", k)
		}
	}
	if len(attrs) == 0 {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(attrs); err != nil {
		return fmt.Errorf("attrs: %w", err)
	}
	if n := len(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); n > MaxAttrsBytes {
		return fmt.Errorf("attrs are larger than %d bytes", MaxAttrsBytes)
	}
	return nil
}

// ValidPort reports whether p is a port an address may name: 1-65535.
func ValidPort(p int) bool { return p >= 1 && p <= MaxPort }

// SplitHostPort splits s, a host:port address, into its host and a port of
// 1-65535. The host may be empty (":31413", a listen address); a caller that
// needs a host another machine can dial checks it. The port is read as
// strconv.Atoi reads it, which fsm's Apply relies on: the set of Raft
// addresses a candidate directory entry may hold must never change.
func SplitHostPort(s string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %w", s, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || !ValidPort(n) {
		return "", 0, fmt.Errorf("%q: port must be 1-65535", s)
	}
	return host, n, nil
}

// ErrInvalidURL is returned by ParseOrigin for an address that is not an
// http(s) origin.
var ErrInvalidURL = errors.New("invalid URL")

// ParseOrigin checks that raw (surrounding white space ignored) is an http or
// https origin — no user or password, no query, no fragment, a path of "" or
// "/", a port of 1-65535 when given — and returns it normalized to
// scheme://host[:port], with the scheme and host lowercased and a default
// port (80 for http, 443 for https) dropped. It follows the TypeScript
// client's address() (URL.origin), so an address from the configuration
// compares equal to the one a member builds; unlike it, port 0 is refused and
// IPv4/IDN host spellings are not rewritten. Errors wrap ErrInvalidURL.
func ParseOrigin(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidURL, s, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", bad("not a URL: %v", errors.Unwrap(err))
	}
	// url.Parse lowercases the scheme.
	switch path := u.EscapedPath(); {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", bad("scheme must be http or https")
	case u.Opaque != "" || u.Hostname() == "":
		return "", bad("missing host")
	case u.User != nil:
		return "", fmt.Errorf("%w: an address must not carry a user or password", ErrInvalidURL)
	case u.RawQuery != "":
		return "", bad("must not have a query")
	case u.Fragment != "":
		return "", bad("must not have a fragment")
	case path != "" && path != "/":
		return "", bad("must be an origin with no path (got path %q)", path)
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || !ValidPort(n) {
			return "", bad("port must be 1-65535")
		}
		port = strconv.Itoa(n)
		if (u.Scheme == "http" && n == 80) || (u.Scheme == "https" && n == 443) {
			port = ""
		}
	}
	switch {
	case port != "":
		host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		host = "[" + host + "]" // IPv6 literal
	}
	return u.Scheme + "://" + host, nil
}
