package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Error codes of the operations routes.
const (
	CodeInvalidSnapshot = "invalid-snapshot"   // 400: not a snapshot file, truncated, corrupt, or a record no replica could hold
	CodeSnapshotTooNew  = "snapshot-too-new"   // 409: the file's format is above the cluster's format level
	CodeRestoreFailed   = "restore-failed"     // 503: the restore was refused before anything changed; retry
	CodeTransferFailed  = "transfer-failed"    // 409: leadership did not move as asked (see the message)
	CodeSnapshotTooBig  = "snapshot-too-large" // 413: a body over MaxSnapshotBytes
)

// The snapshot file. GET /v1/snapshot answers it and PUT /v1/snapshot takes
// it; `elanous-node snapshot save` writes it as received:
//
//	line 1   the header: one JSON object (SnapshotHeader) and "\n"
//	then     exactly header.size bytes: the snapshot document, whose
//	         SHA-256 is header.sha256
//
// Nothing follows the document. The document is the replicated state as a
// Raft snapshot holds it (ARCHITECTURE.md, "Snapshots"). The header is not
// covered by the checksum; a reader checks that its figures match the
// document's.
const (
	// SnapshotKind is the header's "kind": it tells a snapshot file from
	// any other JSON.
	SnapshotKind = "elanous-snapshot"
	// SnapshotContainer is the version of this layout.
	SnapshotContainer = 1
	// SnapshotContentType is the media type of the file.
	SnapshotContentType = "application/vnd.elanous.snapshot"
	// MaxSnapshotHeaderBytes bounds the header line.
	MaxSnapshotHeaderBytes = 64 << 10
	// MaxSnapshotBytes bounds a snapshot file a server accepts: far above a
	// state of the default cluster-wide resource limit (250,000 resources
	// of a few hundred bytes each).
	MaxSnapshotBytes = 1 << 30
)

// SnapshotHeader is the first line of a snapshot file.
type SnapshotHeader struct {
	Kind      string `json:"kind"`
	Container int    `json:"container"`
	// Index is the index of the last command the state holds, Term the
	// leader's term when it was saved, Generation and Holder the primary
	// claim it holds.
	Index      uint64 `json:"index"`
	Term       uint64 `json:"term"`
	Generation uint64 `json:"generation"`
	Holder     string `json:"holder"`
	// FormatLevel is the document's format (its "version").
	FormatLevel int `json:"formatLevel"`
	// LastNow is the state's cluster time in Unix ms; TakenAt the saving
	// leader's wall clock (RFC 3339), for people.
	LastNow int64          `json:"lastNow"`
	TakenAt string         `json:"takenAt"`
	Counts  SnapshotCounts `json:"counts"`
	// Size and SHA256 are the document's length in bytes and SHA-256 (hex).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Version is the version of the build that saved it.
	Version string `json:"version,omitempty"`
}

// SnapshotCounts sums a snapshot's tables.
type SnapshotCounts struct {
	Resources  int `json:"resources"`
	Leases     int `json:"leases"`
	Tokens     int `json:"tokens"`
	Candidates int `json:"candidates"`
}

// ErrSnapshotFile wraps every way ReadSnapshotHeader finds a file not to be
// a snapshot file of a layout this build reads.
var ErrSnapshotFile = errors.New("not an elanous snapshot file")

// Line returns the header as the first line of a snapshot file.
func (h SnapshotHeader) Line() []byte {
	data, _ := json.Marshal(h) // a struct of strings and numbers always encodes
	return append(data, '\n')
}

// ReadSnapshotHeader reads and checks the header line of a snapshot file,
// leaving r at the first byte of the document.
func ReadSnapshotHeader(r *bufio.Reader) (SnapshotHeader, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxSnapshotHeaderBytes {
			return SnapshotHeader{}, fmt.Errorf("%w: no header line in its first %d bytes", ErrSnapshotFile, MaxSnapshotHeaderBytes)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return SnapshotHeader{}, fmt.Errorf("%w: the file is empty", ErrSnapshotFile)
			}
			return SnapshotHeader{}, fmt.Errorf("%w: the header line is cut short", ErrSnapshotFile)
		}
		return SnapshotHeader{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var h SnapshotHeader
	if err := dec.Decode(&h); err != nil {
		return SnapshotHeader{}, fmt.Errorf("%w: the first line is not a snapshot header: %v", ErrSnapshotFile, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return SnapshotHeader{}, fmt.Errorf("%w: the header line has data after its JSON object", ErrSnapshotFile)
	}
	switch {
	case h.Kind != SnapshotKind:
		return SnapshotHeader{}, fmt.Errorf("%w: the header's kind is %q, want %q", ErrSnapshotFile, h.Kind, SnapshotKind)
	case h.Container != SnapshotContainer:
		return SnapshotHeader{}, fmt.Errorf("%w: layout %d; this build reads layout %d", ErrSnapshotFile, h.Container, SnapshotContainer)
	case h.Size <= 0 || h.Size > MaxSnapshotBytes:
		return SnapshotHeader{}, fmt.Errorf("%w: document size %d is not between 1 and %d", ErrSnapshotFile, h.Size, MaxSnapshotBytes)
	case !ValidSHA256(h.SHA256):
		return SnapshotHeader{}, fmt.Errorf("%w: sha256 %q is not 64 lowercase hex characters", ErrSnapshotFile, h.SHA256)
	}
	return h, nil
}

// RestoreResult answers PUT /v1/snapshot: the state the cluster now holds
// and the backup it came from.
type RestoreResult struct {
	// Index is the restored state's index (every table's change index);
	// Generation and Holder its claim, the current leader's.
	Index       uint64         `json:"index"`
	Generation  uint64         `json:"generation"`
	Holder      string         `json:"holder"`
	FormatLevel int            `json:"formatLevel"`
	Counts      SnapshotCounts `json:"counts"`
	// Backup is the header of the file restored.
	Backup SnapshotHeader `json:"backup"`
	TookMs int64          `json:"tookMs"`
}

// TransferRequest is the optional body of POST /v1/cluster/leader/transfer.
type TransferRequest struct {
	// To is the machine to hand leadership to; empty: the most up-to-date
	// other voter.
	To string `json:"to,omitempty"`
}

// TransferResult answers POST /v1/cluster/leader/transfer once the new
// leader's claim is applied.
type TransferResult struct {
	From       string `json:"from"`
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	TookMs     int64  `json:"tookMs"`
}
