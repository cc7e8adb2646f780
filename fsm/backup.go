package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/elanous/elanous-node/wire"
)

// Backups (ARCHITECTURE.md, "Backup and restore"): Export is the read side, a
// consistent copy of the state written as the snapshot document; ReadBackup
// and Backup.Rebase are the restore side, which check a document and turn it
// into the one snapshot every replica of a running cluster installs.

// Errors of the restore side.
var (
	// ErrInvalidSnapshot is returned by ReadBackup for a document that does
	// not decode, has a version this build does not read, or holds a record
	// no replica could hold (a bad id, a duplicate key). Maps to 400.
	ErrInvalidSnapshot = errors.New("invalid snapshot")
	// ErrSnapshotTooNew is returned by Backup.Rebase when the document's
	// format is above the cluster's format level: restoring it would either
	// lose its newer content or hand servers of an older build a snapshot
	// they cannot read. Maps to 409.
	ErrSnapshotTooNew = errors.New("snapshot format is newer than the cluster's format level")
)

// Export is a consistent copy of the state for a backup, taken in O(1) (see
// FSM.view). It is immutable: writing it while Apply goes on is safe.
type Export struct {
	v       view
	applied uint64
}

// Export copies the state for a backup.
func (f *FSM) Export() Export {
	v, applied := f.view()
	return Export{v: v, applied: applied}
}

// Applied returns the index of the last command the copy holds.
func (e Export) Applied() uint64 { return e.applied }

// Format returns the copy's format level (the document's version).
func (e Export) Format() int { return e.v.format }

// Primary returns the copy's primary claim.
func (e Export) Primary() Primary { return e.v.primary }

// LastNow returns the copy's cluster time in Unix ms.
func (e Export) LastNow() int64 { return e.v.lastNow }

// Counts returns the size of each table of the copy.
func (e Export) Counts() Counts {
	return Counts{Resources: e.v.resources.Len(), Leases: len(e.v.leases), Tokens: len(e.v.tokens), Candidates: len(e.v.cands)}
}

// WriteTo writes the snapshot document exactly as Persist does (with the
// applied index and a final newline), so the same copy always gives the
// same bytes.
func (e Export) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	if err := e.v.write(cw, e.applied); err != nil {
		return cw.n, fmt.Errorf("write snapshot document: %w", err)
	}
	if _, err := cw.Write([]byte("\n")); err != nil {
		return cw.n, fmt.Errorf("write snapshot document: %w", err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Backup is a snapshot document read and checked for a restore. Rebase turns
// it into the document a running cluster installs; it is used once.
type Backup struct {
	version  int
	applied  uint64
	primary  Primary
	lastNow  int64
	maxIndex uint64
	counts   Counts
	st       *state // nil once Rebase used it
}

// ReadBackup decodes a snapshot document (of any format from 1 to
// MaxFormat) strictly — no unknown field, nothing after it — and checks
// every record as a replica would have to hold it. Any failure wraps
// ErrInvalidSnapshot; nothing is changed anywhere.
func ReadBackup(r io.Reader) (*Backup, error) {
	doc, resources, err := readSnapshot(bufio.NewReaderSize(r, 64<<10), &strictRead{check: checkResource})
	if errors.Is(err, errDataAfter) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the document does not decode: %v", ErrInvalidSnapshot, err)
	}
	if err := doc.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	maxIndex := doc.maxIndex()
	resources.Ascend(func(r *record) bool {
		maxIndex = max(maxIndex, r.revision)
		return true
	})
	st, err := doc.state(resources)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	return &Backup{
		version: doc.Version, applied: doc.Applied, primary: doc.Primary, lastNow: doc.LastNow,
		maxIndex: maxIndex,
		counts:   Counts{Resources: st.resources.Len(), Leases: len(st.leases), Tokens: len(st.tokens), Candidates: len(st.candidates)},
		st:       st,
	}, nil
}

// Version returns the document's format.
func (b *Backup) Version() int { return b.version }

// Applied returns the applied index the document records (0 if none).
func (b *Backup) Applied() uint64 { return b.applied }

// Primary returns the document's primary claim.
func (b *Backup) Primary() Primary { return b.primary }

// LastNow returns the document's cluster time in Unix ms.
func (b *Backup) LastNow() int64 { return b.lastNow }

// Counts returns the size of each table of the document.
func (b *Backup) Counts() Counts { return b.counts }

// MaxIndex returns the highest log index the document mentions: its applied
// index, its tables' change indexes, the claim's index, every lease's fence
// and every resource's revision. A restore must put the cluster's log past
// it, so that every later grant's fence is above every restored one.
func (b *Backup) MaxIndex() uint64 { return b.maxIndex }

// RestoreParams are what the leader of the running cluster contributes to a
// restore: who claims the restored state, and the cluster's own figures.
type RestoreParams struct {
	// Holder and Term are the leader's name and current term: the restored
	// claim is theirs, so the generation never goes backwards.
	Holder string
	Term   uint64
	// Now is the leader's cluster time (Unix ms) and GraceMs its claim
	// grace: every TTL is rebased onto Now as a claim rebases it.
	Now     int64
	GraceMs int64
	// Index is above MaxIndex and above every index the cluster has used: the
	// restored state's applied index, its claim's index and every table's
	// change index, so blocking queries see a change.
	Index uint64
	// Format is the cluster's format level: the document is written at it.
	Format int
	// Candidates is the cluster's candidate directory, which a restore keeps
	// (the Raft configuration is the cluster's, not the backup's).
	Candidates []Candidate
}

// Rebase turns the backup into the snapshot document the cluster installs:
// the records of the backup with every TTL rebased exactly as a claim
// rebases it (a record with remaining = expiresAt − the backup's lastNow > 0
// gets Now + remaining + GraceMs, one already due becomes due at Now), the
// claim of p.Holder at p.Term, the cluster's candidate directory and format
// level, and p.Index as the applied index and every table's change index.
// Leases keep their id, lease id, generation and fence; tokens and limits are
// the backup's. The result is written at p.Format; a backup of a higher
// format is refused with ErrSnapshotTooNew. Every replica installs the bytes
// Rebase returns, so it runs once, on the leader.
func (b *Backup) Rebase(p RestoreParams) ([]byte, error) {
	if b.st == nil {
		return nil, errors.New("rebase backup: already used")
	}
	if p.Format < 1 || p.Format > MaxFormat {
		return nil, fmt.Errorf("rebase backup: format level %d is not one this build knows (1 to %d)", p.Format, MaxFormat)
	}
	if b.version > p.Format {
		return nil, fmt.Errorf("%w: the backup is at format %d, the cluster at %d; restore it once every server runs a build that knows format %d and the leader has raised the level",
			ErrSnapshotTooNew, b.version, p.Format, b.version)
	}
	if p.Index <= b.maxIndex {
		return nil, fmt.Errorf("rebase backup: index %d is not above the backup's %d", p.Index, b.maxIndex)
	}
	st := b.st
	b.st = nil
	st.format = p.Format
	st.candidates = map[string]Candidate{}
	if p.Format >= 2 {
		for _, c := range p.Candidates {
			st.candidates[c.Machine] = c
		}
	} else {
		st.limits = Limits{}
	}
	if p.Format < TimelineFormat {
		st.timeline = nil
	}
	// The claim's own rule, applied by the claim's own code at the restore's
	// term and index.
	a := applier{table: commandTable, st: st, term: p.Term, index: p.Index, now: st.lastNow}
	if res := a.claim(ClaimPrimary{Header: Header{Now: p.Now}, Holder: p.Holder, GraceMs: p.GraceMs}); res != nil {
		if err, ok := res.(error); ok {
			return nil, fmt.Errorf("rebase backup: %w", err)
		}
	}
	st.lastNow = a.now
	for t := range st.indexes {
		st.indexes[t] = p.Index
	}
	var out strings.Builder
	if err := viewOf(st).write(&out, p.Index); err != nil {
		return nil, fmt.Errorf("rebase backup: %w", err)
	}
	out.WriteString("\n")
	return []byte(out.String()), nil
}

// viewOf is FSM.view for a state no FSM holds yet.
func viewOf(st *state) view {
	return view{
		resources: st.resources.Clone(),
		leases:    st.sortedLeases(),
		tokens:    st.sortedTokens(),
		idem:      st.sortedIdem(),
		cands:     st.sortedCandidates(),
		limits:    st.limits,
		timeline:  append([]TimelineEntry(nil), st.timeline...),
		primary:   st.primary,
		format:    st.format,
		lastNow:   st.lastNow,
		indexes:   st.indexes,
	}
}

// check refuses a document no replica could hold: the rules are the ones
// Apply enforces on the commands that create each record. The resources are
// checked as they are read (checkResource), and are not in doc.
func (doc *document) check() error {
	if doc.Version < 1 || doc.Version > MaxFormat {
		return fmt.Errorf("snapshot version %d is not supported (this build reads 1 to %d)", doc.Version, MaxFormat)
	}
	if len(doc.Indexes) > int(numTables) {
		return fmt.Errorf("%d table indexes, at most %d", len(doc.Indexes), numTables)
	}
	if doc.Version < 2 && (len(doc.Candidates) > 0 || doc.Limits != (Limits{})) {
		return fmt.Errorf("a version %d document holds format 2 content (candidates or limits)", doc.Version)
	}
	ports := make(map[int]bool, len(doc.Leases))
	for _, l := range doc.Leases {
		if !wire.ValidPort(l.Port) || l.ID != fmt.Sprintf("port-lease:%d", l.Port) {
			return fmt.Errorf("lease %q on port %d: not a port lease", l.ID, l.Port)
		}
		if ports[l.Port] {
			return fmt.Errorf("port %d is leased twice", l.Port)
		}
		ports[l.Port] = true
		if l.LeaseID == "" || len(l.LeaseID) > wire.MaxLeaseIDLen || !wire.ValidMachine(l.Machine) || l.Fence == 0 {
			return fmt.Errorf("lease on port %d: lease id, machine or fence missing or not valid", l.Port)
		}
		if l.TTLMs <= 0 || l.TTLMs > wire.MaxLeaseTTLMs {
			return fmt.Errorf("lease on port %d: ttlMs %d out of range", l.Port, l.TTLMs)
		}
	}
	machines := make(map[string]bool, len(doc.Tokens))
	hashes := make(map[string]bool, len(doc.Tokens))
	for _, t := range doc.Tokens {
		if !wire.ValidMachine(t.Machine) || !wire.ValidSHA256(t.SHA256) {
			return fmt.Errorf("token of machine %q: machine or sha256 not valid", t.Machine)
		}
		if machines[t.Machine] || hashes[t.SHA256] {
			return fmt.Errorf("token of machine %q: machine or hash appears twice", t.Machine)
		}
		machines[t.Machine], hashes[t.SHA256] = true, true
	}
	keys := make(map[string]bool, len(doc.Idempotency))
	for _, rec := range doc.Idempotency {
		if rec.Key == "" || keys[rec.Key] || !wire.ValidPort(rec.Port) {
			return fmt.Errorf("idempotency record %q: empty, repeated or bad port", rec.Key)
		}
		keys[rec.Key] = true
	}
	cands := make(map[string]bool, len(doc.Candidates))
	for _, c := range doc.Candidates {
		if err := validCandidate(c); err != nil {
			return err
		}
		if cands[c.Machine] {
			return fmt.Errorf("candidate %q appears twice", c.Machine)
		}
		cands[c.Machine] = true
	}
	if l := doc.Limits; l.ResourcesPerMachine < 0 || l.LeasesPerMachine < 0 || l.Resources < 0 || l.IdempotencyKeys < 0 {
		return fmt.Errorf("limits must not be negative: %+v", l)
	}
	if h := doc.Primary.Holder; h != "" && !wire.ValidCandidate(h) {
		return fmt.Errorf("primary holder %q is not a candidate name", h)
	}
	return checkTimeline(doc.Timeline)
}

// checkResource refuses a resource no replica could hold (ReadBackup checks
// each as it reads it).
func checkResource(r *Resource) error {
	if err := wire.CheckResourceID(r.ID); err != nil {
		return fmt.Errorf("resource: %v", err)
	}
	if !wire.ValidKind(r.Kind) || !wire.ValidMachine(r.Machine) {
		return fmt.Errorf("resource %q: kind %q or machine %q is not valid", r.ID, r.Kind, r.Machine)
	}
	if r.TTLMs <= 0 || r.TTLMs > wire.MaxResourceTTLMs {
		return fmt.Errorf("resource %q: ttlMs %d out of range", r.ID, r.TTLMs)
	}
	if err := wire.CheckAttrs(r.Attrs); err != nil {
		return fmt.Errorf("resource %q: %v", r.ID, err)
	}
	return nil
}

// maxIndex is Backup.MaxIndex of the document without its resources (which
// readSnapshot keeps out of it).
func (doc *document) maxIndex() uint64 {
	m := max(doc.Applied, doc.Primary.Index)
	for _, i := range doc.Indexes {
		m = max(m, i)
	}
	for _, l := range doc.Leases {
		m = max(m, l.Fence)
	}
	for _, e := range doc.Timeline {
		m = max(m, e.Index)
	}
	return m
}
