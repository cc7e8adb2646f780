package fsm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/elanous/elanous-node/wire"
	"github.com/google/btree"
	"github.com/hashicorp/raft"
)

// MaxFormat is the highest format level this build knows. A cluster's state
// is at one level (SetFormat raises it): the level is the version of the
// snapshot document Persist writes and decides which command types the
// leader may propose. Restore reads every level from 1 to MaxFormat and
// refuses any other. ARCHITECTURE.md, "Versioned formats", says when a level
// is added.
//
// Format 1 is the first release. Format 2 adds group commit (Batch), format
// levels (SetFormat), the candidate directory (PutCandidate, RemoveCandidate,
// a fifth table index), abuse limits (SetLimits, quotas in register and
// acquire, a bound on remembered Idempotency-Keys), machine ids that name
// their machine, and commands that name the machine token behind them; its
// document adds "candidates" and "limits". Format 3 adds the renewal slack
// (HeartbeatResource and RenewLease carry slackMs, and a renewal never moves
// an expiry earlier); its document is format 2's. Format 4 adds the
// timeline (timeline.go: the last claims and candidate-directory changes,
// appended by the claim and candidate commands); its document adds
// "timeline".
const MaxFormat = 4

// SnapshotVersion is the newest snapshot document version this build writes
// (at format level MaxFormat).
const SnapshotVersion = MaxFormat

// document is the versioned snapshot encoding, as Restore reads it. Lists are
// sorted so the same state always encodes to the same bytes (Hash relies on
// it). view.write writes the same document record by record.
type document struct {
	Version   int           `json:"version"`
	Resources []Resource    `json:"resources"`
	Leases    []leaseRecord `json:"leases"`
	Tokens    []MemberToken `json:"tokens"`
	Primary   Primary       `json:"primary"`
	LastNow   int64         `json:"lastNow"`
	Indexes   []uint64      `json:"indexes"`
	// Idempotency holds the remembered Idempotency-Keys, sorted by key.
	Idempotency []idemRecord `json:"idempotency,omitempty"`
	// Candidates is the candidate directory, sorted by machine (format 2).
	Candidates []Candidate `json:"candidates,omitempty"`
	// Limits are the abuse limits as set (format 2).
	Limits Limits `json:"limits"`
	// Timeline is the timeline, oldest first (format 4).
	Timeline []TimelineEntry `json:"timeline,omitempty"`
	// Applied is the FSM's last applied index when the snapshot was taken. It
	// is zero, and so absent, in the document Hash encodes.
	Applied uint64 `json:"applied,omitempty"`
}

// leaseRecord is a PortLease with the fields the wire hides.
type leaseRecord struct {
	PortLease
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// view is a consistent copy of the state for Persist and Hash: the resource
// tree is a lazy copy-on-write clone (O(1) to take), the small tables are
// copied and sorted.
type view struct {
	resources *btree.BTreeG[*record]
	leases    []PortLease
	tokens    []MemberToken
	idem      []idemRecord
	cands     []Candidate
	limits    Limits
	timeline  []TimelineEntry
	primary   Primary
	format    int
	lastNow   int64
	indexes   [numTables]uint64
}

// view copies the state. It takes the write lock because cloning the tree
// marks its nodes copy-on-write; the copy itself costs O(1) for resources and
// O(band + machines + remembered keys) for the rest.
func (f *FSM) view() (view, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return viewOf(f.st), f.applied
}

// write encodes the view as the snapshot document, record by record, without
// HTML escaping and without a trailing newline; applied 0 is left out. The
// bytes equal json.Marshal of the equivalent document. Each resource is
// encoded into one reused buffer (record.appendJSON) and streamed to out, so
// the document is never held in memory.
func (v view) write(out io.Writer, applied uint64) error {
	w := bufio.NewWriterSize(out, 64<<10)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var err error
	put := func(s string) {
		if err == nil {
			_, err = w.WriteString(s)
		}
	}
	value := func(x any) {
		if err != nil {
			return
		}
		buf.Reset()
		if err = enc.Encode(x); err == nil {
			_, err = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		}
	}
	list := func(n int, item func(i int)) {
		put("[")
		for i := range n {
			if i > 0 {
				put(",")
			}
			item(i)
		}
		put("]")
	}
	put(`{"version":` + strconv.Itoa(v.format) + `,"resources":[`)
	rec := make([]byte, 0, 1024)
	first := true
	v.resources.Ascend(func(r *record) bool {
		rec = rec[:0]
		if !first {
			rec = append(rec, ',')
		}
		first = false
		rec = r.appendJSON(rec)
		if err == nil {
			_, err = w.Write(rec)
		}
		return err == nil
	})
	put(`],"leases":`)
	list(len(v.leases), func(i int) {
		value(leaseRecord{PortLease: v.leases[i], IdempotencyKey: v.leases[i].IdempotencyKey})
	})
	put(`,"tokens":`)
	list(len(v.tokens), func(i int) { value(v.tokens[i]) })
	put(`,"primary":`)
	value(v.primary)
	put(`,"lastNow":` + strconv.FormatInt(v.lastNow, 10) + `,"indexes":`)
	value(v.indexes[:tablesAt(v.format)])
	if len(v.idem) > 0 {
		put(`,"idempotency":`)
		list(len(v.idem), func(i int) { value(v.idem[i]) })
	}
	if v.format >= 2 {
		put(`,"candidates":`)
		list(len(v.cands), func(i int) { value(v.cands[i]) })
		put(`,"limits":`)
		value(v.limits)
	}
	if v.format >= TimelineFormat {
		put(`,"timeline":`)
		list(len(v.timeline), func(i int) { value(v.timeline[i]) })
	}
	if applied != 0 {
		put(`,"applied":` + strconv.FormatUint(applied, 10))
	}
	put("}")
	if err != nil {
		return err
	}
	return w.Flush()
}

// Snapshot copies the state (see view); Persist encodes the copy later while
// Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	v, applied := f.view()
	return &snapshot{view: v, applied: applied}, nil
}

// Restore replaces the state with a snapshot: it decodes into a fresh state
// and swaps it in under the lock, so readers never see a half-restored state.
// The document is read as a stream (readSnapshot): only one resource at a
// time is held in its decoded form.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	doc, resources, err := readSnapshot(bufio.NewReaderSize(rc, 64<<10), nil)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	st, err := doc.state(resources)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	f.applied = doc.Applied
	f.ring.reset(doc.Applied)
	for t := range f.watches {
		close(f.watches[t])
		f.watches[t] = make(chan struct{})
	}
	return nil
}

// strictRead is how ReadBackup reads a document: no unknown member, nothing
// after the document, every resource checked (check) as it is read and none
// given twice.
type strictRead struct {
	check func(r *Resource) error
}

// errDataAfter is readSnapshot's strict refusal of data after the document.
var errDataAfter = errors.New("data after the document")

// readSnapshot decodes a snapshot document as json.Decoder.Decode would into
// a document, except that the resources are stored as records one by one
// while the document is read, instead of decoded into doc.Resources (which
// stays empty). The other members are small and decoded as a document. As
// encoding/json does, a member name matches its field case-insensitively and
// a member given twice keeps its last value. Anything after the document is
// not read, unless strict (non-nil) refuses it.
func readSnapshot(r io.Reader, strict *strictRead) (document, *btree.BTreeG[*record], error) {
	var doc document
	resources := btree.NewG(btreeDegree, lessRecord)
	dec := json.NewDecoder(r)
	if strict != nil {
		dec.DisallowUnknownFields()
	}
	if tok, err := dec.Token(); err != nil {
		return doc, nil, err
	} else if tok != json.Delim('{') {
		return doc, nil, fmt.Errorf("the document is %v, not an object", tok)
	}
	var rest bytes.Buffer
	rest.WriteByte('{')
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return doc, nil, err
		}
		key, _ := tok.(string) // an object's member names are strings
		if strings.EqualFold(key, "resources") {
			resources = btree.NewG(btreeDegree, lessRecord)
			if err := readResources(dec, resources, strict); err != nil {
				return doc, nil, fmt.Errorf("resources: %w", err)
			}
			continue
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return doc, nil, err
		}
		if rest.Len() > 1 {
			rest.WriteByte(',')
		}
		name, err := json.Marshal(key)
		if err != nil {
			return doc, nil, err
		}
		rest.Write(name)
		rest.WriteByte(':')
		rest.Write(v)
	}
	if _, err := dec.Token(); err != nil {
		return doc, nil, err
	}
	if strict != nil {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return doc, nil, errDataAfter
		}
	}
	rest.WriteByte('}')
	restDec := json.NewDecoder(&rest)
	if strict != nil {
		restDec.DisallowUnknownFields()
	}
	if err := restDec.Decode(&doc); err != nil {
		return doc, nil, err
	}
	return doc, resources, nil
}

// readResources reads the value of "resources" (an array of resources, or
// null) into tree; a later record with an id replaces an earlier one, or is
// refused when strict.
func readResources(dec *json.Decoder, tree *btree.BTreeG[*record], strict *strictRead) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("%v is not an array", tok)
	}
	for dec.More() {
		var r Resource
		if err := dec.Decode(&r); err != nil {
			return err
		}
		if strict != nil {
			if err := strict.check(&r); err != nil {
				return err
			}
		}
		rec, err := storedRecord(&r)
		if err != nil {
			return err
		}
		if _, dup := tree.ReplaceOrInsert(rec); dup && strict != nil {
			return fmt.Errorf("resource %q appears twice", r.ID)
		}
	}
	_, err = dec.Token()
	return err
}

// storedRecord is the record a replica stores for r.
func storedRecord(r *Resource) (*record, error) {
	attrs, err := encodeAttrs(r.Attrs)
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", r.ID, err)
	}
	return newRecord(r, attrs), nil
}

// state builds the state the document and its resources (readSnapshot)
// describe, indexes included.
func (doc document) state(resources *btree.BTreeG[*record]) (*state, error) {
	if doc.Version < 1 || doc.Version > MaxFormat {
		return nil, fmt.Errorf("snapshot version %d is not supported (this build reads 1 to %d)", doc.Version, MaxFormat)
	}
	st := newState()
	st.format = doc.Version
	st.resources = resources
	for _, l := range doc.Leases {
		if !wire.ValidPort(l.Port) {
			return nil, fmt.Errorf("lease on port %d: a port is 1-65535", l.Port)
		}
		p := l.PortLease
		p.IdempotencyKey = l.IdempotencyKey
		st.leases[p.Port] = p
	}
	for _, t := range doc.Tokens {
		st.tokens[t.Machine] = t
	}
	// One hash, one machine (IssueToken refuses a hash another machine
	// holds): otherwise which machine a token names would depend on map order.
	owner := make(map[string]string, len(st.tokens))
	for _, t := range st.tokens {
		if other, dup := owner[t.SHA256]; dup {
			return nil, fmt.Errorf("machines %q and %q hold the same token hash", min(other, t.Machine), max(other, t.Machine))
		}
		owner[t.SHA256] = t.Machine
	}
	for _, rec := range doc.Idempotency {
		st.idem[rec.Key] = rec
	}
	// A version 1 document has neither (Persist at level 1 would drop them);
	// limits are never negative (SetLimits refuses them).
	if doc.Version < 2 && (len(doc.Candidates) > 0 || doc.Limits != (Limits{})) {
		return nil, fmt.Errorf("snapshot version %d holds candidates or limits, which came with version 2", doc.Version)
	}
	if l := doc.Limits; l.ResourcesPerMachine < 0 || l.LeasesPerMachine < 0 || l.Resources < 0 || l.IdempotencyKeys < 0 {
		return nil, fmt.Errorf("limits must not be negative: %+v", l)
	}
	for _, c := range doc.Candidates {
		st.candidates[c.Machine] = c
	}
	if doc.Version < TimelineFormat && len(doc.Timeline) > 0 {
		return nil, fmt.Errorf("snapshot version %d holds a timeline, which came with version %d", doc.Version, TimelineFormat)
	}
	if len(doc.Timeline) > TimelineMax {
		return nil, fmt.Errorf("a timeline of %d entries, at most %d", len(doc.Timeline), TimelineMax)
	}
	st.timeline = doc.Timeline
	st.limits = doc.Limits
	st.primary = doc.Primary
	st.lastNow = doc.LastNow
	copy(st.indexes[:tablesAt(doc.Version)], doc.Indexes)
	st.rebuildIndexes()
	return st, nil
}

type snapshot struct {
	view    view
	applied uint64
}

// Persist writes the document and cancels the sink on any error. Like
// Encode it does not escape HTML, so a replica restored from a snapshot holds
// the same attrs bytes as one that applied the log.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	err := s.view.write(sink, s.applied)
	if err == nil {
		_, err = sink.Write([]byte("\n"))
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release is a no-op: the snapshot holds a private copy.
func (s *snapshot) Release() {}
