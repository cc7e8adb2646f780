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
	BatchType             CommandType = 11
	SetFormatType         CommandType = 12
	PutCandidateType      CommandType = 13
	RemoveCandidateType   CommandType = 14
	SetLimitsType         CommandType = 15
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
	// TokenSHA256 is the SHA-256 of the machine token that authorised the
	// command (format 2). Apply refuses the command with ErrTokenRevoked when
	// the machine's token is no longer that one.
	TokenSHA256 string `json:"tokenSha256,omitempty"`
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
// SlackMs (format 3) is the renewal slack the leader chose: the record is
// renewed to at least now + TTL + min(SlackMs, TTL), so that later renewals
// find it covered and need no entry (ARCHITECTURE.md, "Renewals").
type HeartbeatResource struct {
	Header
	Caller  Caller                     `json:"caller"`
	ID      string                     `json:"id"`
	Attrs   map[string]json.RawMessage `json:"attrs,omitempty"`
	SlackMs int64                      `json:"slackMs,omitempty"`
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

// RenewLease extends a live lease held by the caller under LeaseID. SlackMs
// (format 3) is the renewal slack, as in HeartbeatResource.
type RenewLease struct {
	Header
	Caller  Caller `json:"caller"`
	Port    int    `json:"port"`
	LeaseID string `json:"leaseId"`
	SlackMs int64  `json:"slackMs,omitempty"`
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

// Batch carries several commands in one log entry (group commit). They are
// applied in order, each as if it were its own entry at the batch's term and
// index, and each gets its own result (see BatchResult); one command's error
// does not touch the others. A batch holds no claim, sweep, format change or
// batch, and at most one acquire, so every grant still has its own log index
// as its fence. The leader proposes batches only once the cluster's format is
// at least 2 (see SetFormat).
type Batch struct {
	Header
	Commands []BatchItem `json:"commands"`
}

// BatchItem is one command of a Batch: its type and its JSON body.
type BatchItem struct {
	Type CommandType     `json:"type"`
	Body json.RawMessage `json:"body"`
}

// BatchResult is what a Batch returns: the result of each command, in order
// (a record, nil or an error, as the command alone would return).
type BatchResult struct {
	Results []any
}

// SetFormat raises the cluster's format level: the version of the snapshot
// document and the set of command types the leader may propose. The leader
// proposes it only once every server of the configuration runs a build that
// knows the level, so no replica ever meets a type it cannot apply
// (ARCHITECTURE.md, "Versioned formats").
type SetFormat struct {
	Header
	Level int `json:"level"`
}

// PutCandidate adds or updates an entry of the candidate directory (format 2).
type PutCandidate struct {
	Header
	Candidate Candidate `json:"candidate"`
}

// RemoveCandidate removes an entry of the candidate directory (format 2).
type RemoveCandidate struct {
	Header
	Machine string `json:"machine"`
}

// SetLimits replaces the cluster's abuse limits (format 2).
type SetLimits struct {
	Header
	Limits Limits `json:"limits"`
}

// NewBatch encodes cmds into a Batch stamped at now. It refuses what a batch
// may not hold.
func NewBatch(now int64, cmds []Command) (Batch, error) {
	b := Batch{Header: Header{Now: now}, Commands: make([]BatchItem, 0, len(cmds))}
	acquires := 0
	for _, c := range cmds {
		if err := batchable(commandTable, c.Type()); err != nil {
			return Batch{}, err
		}
		if c.Type() == AcquireLeaseType {
			acquires++
		}
		body, err := marshalJSON(c)
		if err != nil {
			return Batch{}, fmt.Errorf("encode command %d: %w", c.Type(), err)
		}
		b.Commands = append(b.Commands, BatchItem{Type: c.Type(), Body: body})
	}
	if acquires > 1 {
		return Batch{}, fmt.Errorf("%w: a batch holds at most one acquire", ErrInvalidCommand)
	}
	return b, nil
}

// batchable reports whether a command of type t may be part of a batch, as
// its command table entry says. The table is a parameter because the batch's
// own apply function, which is in the table, calls it (an initialization
// cycle otherwise).
func batchable(table map[CommandType]commandSpec, t CommandType) error {
	sp, ok := table[t]
	if !ok {
		return fmt.Errorf("%w: command type %d in a batch is unknown", ErrInvalidCommand, t)
	}
	if !sp.inBatch {
		return fmt.Errorf("%w: a %s cannot be part of a batch", ErrInvalidCommand, sp.name)
	}
	return nil
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
func (Batch) Type() CommandType             { return BatchType }
func (SetFormat) Type() CommandType         { return SetFormatType }
func (PutCandidate) Type() CommandType      { return PutCandidateType }
func (RemoveCandidate) Type() CommandType   { return RemoveCandidateType }
func (SetLimits) Type() CommandType         { return SetLimitsType }

// callerCommand is a command an authenticated caller proposed.
type callerCommand interface{ caller() Caller }

func (c RegisterResource) caller() Caller  { return c.Caller }
func (c HeartbeatResource) caller() Caller { return c.Caller }
func (c DeleteResource) caller() Caller    { return c.Caller }
func (c AcquireLease) caller() Caller      { return c.Caller }
func (c RenewLease) caller() Caller        { return c.Caller }
func (c ReleaseLease) caller() Caller      { return c.Caller }

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
