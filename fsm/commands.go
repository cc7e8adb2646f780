package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// CommandType is the first byte of every log entry. Numbers are append-only:
// never reuse or renumber one. 0 is reserved so a zeroed entry is never valid.
type CommandType uint8

// SkipBit marks a command type that a version which does not know it may skip.
// Types without it must be understood; an unknown one panics the replica.
const SkipBit CommandType = 0x80

// Command types. Append only.
const (
	reservedType          CommandType = 0
	RegisterResourceType  CommandType = 1
	HeartbeatResourceType CommandType = 2
	DeleteResourceType    CommandType = 3
	AcquireLeaseType      CommandType = 4
	RenewLeaseType        CommandType = 5
	ReleaseLeaseType      CommandType = 6
	IssueTokenType        CommandType = 7
	RevokeTokenType       CommandType = 8
	ClaimPrimaryType      CommandType = 9
	SweepType             CommandType = 10
)

// Command is a state change proposed through Raft. Every command embeds a
// Header and knows its type byte; Encode turns it into a log entry. The
// command table (table.go) is the one place a type is registered.
type Command interface {
	Type() CommandType
	header() Header
}

// Header is the part every command shares. Its fields are flattened into the
// command's JSON body, so {"now": …} sits beside the command's own fields.
type Header struct {
	// Now is the cluster time in Unix ms, stamped by the leader just before it
	// proposes (see Stamp). Apply reads no clock: this is the only time it sees.
	Now int64 `json:"now"`
}

func (h Header) header() Header { return h }

// setNow is promoted to every *Command; Stamp uses it through the table.
func (h *Header) setNow(now int64) { h.Now = now }

// Caller identifies who proposes a command, as the API layer authenticated it.
// Machine is set for machine tokens: the record's machine must equal it.
// Owner is the token fingerprint. Admin tokens may release any lease.
type Caller struct {
	Owner   string `json:"owner"`
	Machine string `json:"machine,omitempty"`
	Admin   bool   `json:"admin,omitempty"`
}

// RegisterResource creates or replaces a resource (upsert).
type RegisterResource struct {
	Header
	Caller     Caller                     `json:"caller"`
	ID         string                     `json:"id"`
	Kind       string                     `json:"kind"`
	Name       string                     `json:"name"`
	Machine    string                     `json:"machine"`
	Endpoint   string                     `json:"endpoint,omitempty"`
	Attrs      map[string]json.RawMessage `json:"attrs,omitempty"`
	ObservedAt int64                      `json:"observedAt"`
	TTLMs      int64                      `json:"ttlMs"`
}

// HeartbeatResource renews a live resource and merges attrs into its own.
type HeartbeatResource struct {
	Header
	Caller Caller                     `json:"caller"`
	ID     string                     `json:"id"`
	Attrs  map[string]json.RawMessage `json:"attrs,omitempty"`
}

// DeleteResource removes a resource.
type DeleteResource struct {
	Header
	Caller Caller `json:"caller"`
	ID     string `json:"id"`
}

// AcquireLease grants the lowest free port of [BandStart, BandEnd]. The leader
// draws LeaseID before proposing; the band travels in the command so every
// replica allocates from the same one whatever its own configuration says.
type AcquireLease struct {
	Header
	Caller         Caller `json:"caller"`
	LeaseID        string `json:"leaseId"`
	Machine        string `json:"machine"`
	Purpose        string `json:"purpose"`
	TTLMs          int64  `json:"ttlMs"`
	Excluded       []int  `json:"excluded,omitempty"`
	BandStart      int    `json:"bandStart"`
	BandEnd        int    `json:"bandEnd"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// RenewLease extends a live lease held by the caller under LeaseID.
type RenewLease struct {
	Header
	Caller  Caller `json:"caller"`
	Port    int    `json:"port"`
	LeaseID string `json:"leaseId"`
}

// ReleaseLease ends a lease held by the caller (or any lease, for an admin).
type ReleaseLease struct {
	Header
	Caller  Caller `json:"caller"`
	Port    int    `json:"port"`
	LeaseID string `json:"leaseId"`
}

// IssueToken stores the SHA-256 of a new machine token, replacing any
// previous one for the machine. The token itself never enters the log.
type IssueToken struct {
	Header
	Machine string `json:"machine"`
	SHA256  string `json:"sha256"`
}

// RevokeToken removes a machine's token hash.
type RevokeToken struct {
	Header
	Machine string `json:"machine"`
}

// ClaimPrimary is a new leader's first command: it sets the generation to the
// entry's term and rebases every TTL onto the new leader's clock (see Apply).
type ClaimPrimary struct {
	Header
	Holder  string `json:"holder"`
	GraceMs int64  `json:"graceMs"`
}

// Sweep expires every resource and lease due at Now.
type Sweep struct {
	Header
}

// Type implementations.
func (RegisterResource) Type() CommandType  { return RegisterResourceType }
func (HeartbeatResource) Type() CommandType { return HeartbeatResourceType }
func (DeleteResource) Type() CommandType    { return DeleteResourceType }
func (AcquireLease) Type() CommandType      { return AcquireLeaseType }
func (RenewLease) Type() CommandType        { return RenewLeaseType }
func (ReleaseLease) Type() CommandType      { return ReleaseLeaseType }
func (IssueToken) Type() CommandType        { return IssueTokenType }
func (RevokeToken) Type() CommandType       { return RevokeTokenType }
func (ClaimPrimary) Type() CommandType      { return ClaimPrimaryType }
func (Sweep) Type() CommandType             { return SweepType }

// Encode returns the log entry for cmd: its type byte then its JSON body.
// The body is compact JSON without HTML escaping, so attrs enter the log as
// the client wrote them (whitespace aside).
func Encode(cmd Command) ([]byte, error) {
	if _, ok := commandTable[cmd.Type()]; !ok {
		return nil, fmt.Errorf("encode command %d: %w: type is not in the command table", cmd.Type(), ErrInvalidCommand)
	}
	body, err := marshalJSON(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command %d: %w", cmd.Type(), err)
	}
	buf := make([]byte, 0, len(body)+1)
	buf = append(buf, byte(cmd.Type()))
	return append(buf, body...), nil
}

// marshalJSON is json.Marshal without HTML escaping.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Decode parses a log entry. It returns ok=false for an empty entry or a type
// the table does not hold (the caller decides between skipping and
// panicking), and an error wrapping ErrInvalidCommand for a known type whose
// body is malformed.
func Decode(data []byte) (cmd Command, ok bool, err error) {
	if len(data) == 0 {
		return nil, false, nil
	}
	sp, ok := commandTable[CommandType(data[0])]
	if !ok {
		return nil, false, nil
	}
	cmd, err = sp.decode(data[1:])
	return cmd, true, err
}

func decodeBody[T Command](body []byte) (T, error) {
	var v T
	// Unknown fields are ignored: a newer version may add optional fields to a
	// command, and an older replica must apply it the same way it always did.
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("%w: decode %T: %v", ErrInvalidCommand, v, err)
	}
	// dec.More would miss a stray '}' or ']' after the value; only EOF (after
	// optional white space) ends a body.
	if _, err := dec.Token(); err != io.EOF {
		return v, fmt.Errorf("%w: decode %T: trailing data", ErrInvalidCommand, v)
	}
	return v, nil
}
