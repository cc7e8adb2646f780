package fsm

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"
)

// SnapshotVersion is the version of the snapshot document Persist writes.
// Restore refuses a version it does not know.
const SnapshotVersion = 1

// document is the versioned snapshot encoding. Lists are sorted so the same
// state always encodes to the same bytes (Hash relies on it).
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
	// Applied is the FSM's last applied index when the snapshot was taken. It
	// is zero in the document Hash encodes.
	Applied uint64 `json:"applied,omitempty"`
}

// leaseRecord is a PortLease with the fields the wire hides.
type leaseRecord struct {
	PortLease
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

func (f *FSM) documentLocked() document {
	st := f.st
	doc := document{
		Version:   SnapshotVersion,
		Resources: make([]Resource, 0, len(st.resources)),
		Leases:    make([]leaseRecord, 0, len(st.leases)),
		Tokens:    sortedTokens(st.tokens),
		Primary:   st.primary,
		LastNow:   st.lastNow,
		Indexes:   append([]uint64(nil), st.indexes[:]...),
	}
	for _, r := range st.resources {
		doc.Resources = append(doc.Resources, r)
	}
	sortResources(doc.Resources)
	for _, rec := range st.idem {
		doc.Idempotency = append(doc.Idempotency, rec)
	}
	sort.Slice(doc.Idempotency, func(i, j int) bool { return doc.Idempotency[i].Key < doc.Idempotency[j].Key })
	for _, l := range sortedLeases(st.leases) {
		doc.Leases = append(doc.Leases, leaseRecord{PortLease: l, IdempotencyKey: l.IdempotencyKey})
	}
	return doc
}

// Snapshot copies the state under the read lock; Persist encodes it later
// while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	doc := f.documentLocked()
	doc.Applied = f.applied
	return &snapshot{doc: doc}, nil
}

// Restore replaces the state with a snapshot: it decodes into a fresh state
// and swaps it in under the lock, so readers never see a half-restored state.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var doc document
	if err := json.NewDecoder(rc).Decode(&doc); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	st, err := doc.state()
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	f.applied = doc.Applied
	for t := range f.watches {
		close(f.watches[t])
		f.watches[t] = make(chan struct{})
	}
	return nil
}

func (doc document) state() (*state, error) {
	if doc.Version != SnapshotVersion {
		return nil, fmt.Errorf("snapshot version %d is not supported (want %d)", doc.Version, SnapshotVersion)
	}
	st := newState()
	for _, r := range doc.Resources {
		if r.Attrs == nil {
			r.Attrs = map[string]json.RawMessage{}
		}
		st.resources[r.ID] = r
	}
	for _, l := range doc.Leases {
		p := l.PortLease
		p.IdempotencyKey = l.IdempotencyKey
		st.leases[p.Port] = p
	}
	for _, t := range doc.Tokens {
		st.tokens[t.Machine] = t
		st.byHash[t.SHA256] = t.Machine
	}
	for _, rec := range doc.Idempotency {
		st.idem[rec.Key] = rec
	}
	st.primary = doc.Primary
	st.lastNow = doc.LastNow
	copy(st.indexes[:], doc.Indexes)
	return st, nil
}

type snapshot struct{ doc document }

// Persist writes the document and cancels the sink on any error. Like
// Encode it does not escape HTML, so a replica restored from a snapshot holds
// the same attrs bytes as one that applied the log.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	enc := json.NewEncoder(sink)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s.doc); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release is a no-op: the snapshot holds a private copy.
func (s *snapshot) Release() {}
