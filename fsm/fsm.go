package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"
)

// FSM implements raft.FSM over the elanous state. All exported methods are
// safe for concurrent use: raft calls Apply, Snapshot and Restore from its
// FSM goroutine while the API reads.
type FSM struct {
	mu      sync.RWMutex
	st      *state                   // guarded by mu
	applied uint64                   // last applied log index; guarded by mu
	watches [numTables]chan struct{} // closed on the table's next change; guarded by mu
	ring    eventRing                // the recent changes, for event streams; guarded by mu
}

// New returns an empty FSM.
func New() *FSM {
	f := &FSM{st: newState(), ring: newEventRing(DefaultEventRing)}
	for i := range f.watches {
		f.watches[i] = make(chan struct{})
	}
	return f
}

// touchLocked records a change of table t at index and wakes its watchers.
func (f *FSM) touchLocked(t Table, index uint64) {
	f.st.indexes[t] = index
	close(f.watches[t])
	f.watches[t] = make(chan struct{})
}

// Watch returns the index of the last change to table t and a channel closed
// at its next change. Blocking queries wait on the channel.
func (f *FSM) Watch(t Table) (uint64, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.indexes[t], f.watches[t]
}

// Index returns the log index of the last change to table t.
func (f *FSM) Index(t Table) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.indexes[t]
}

// AppliedIndex returns the index of the last log entry applied (or restored
// from a snapshot). raft hands the FSM only LogCommand entries, so after a
// no-op, barrier or configuration entry this is below raft's own applied
// index; a caller waiting for an index must allow for that.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Primary returns the current primary claim (zero before the first claim).
func (f *FSM) Primary() Primary {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.primary
}

// Format returns the cluster's format level (see MaxFormat).
func (f *FSM) Format() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.format
}

// LastNow returns the latest applied cluster time in Unix ms.
func (f *FSM) LastNow() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lastNow
}

// Resource returns the resource with id.
func (f *FSM) Resource(id string) (Resource, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.st.resource(id)
	if !ok {
		return Resource{}, false
	}
	return r.resource(), true
}

// Resources returns the resources matching kind and machine ("" matches all),
// sorted by id. A listing by machine reads only that machine's records; a
// full listing walks a copy of the tree taken in O(1), so writers do not wait
// for it.
func (f *FSM) Resources(kind, machine string) []Resource {
	match := func(r *record) bool { return kind == "" || r.kind.Value() == kind }
	if machine != "" {
		f.mu.RLock()
		defer f.mu.RUnlock()
		ids := f.st.machineResources(machine)
		out := make([]Resource, 0, len(ids))
		for _, id := range ids {
			if r, ok := f.st.resource(id); ok && match(r) {
				out = append(out, r.resource())
			}
		}
		return out
	}
	f.mu.Lock() // Clone writes the tree's copy-on-write marks
	tree := f.st.resources.Clone()
	f.mu.Unlock()
	out := make([]Resource, 0, tree.Len())
	tree.Ascend(func(r *record) bool {
		if match(r) {
			out = append(out, r.resource())
		}
		return true
	})
	return out
}

// Lease returns the lease on port.
func (f *FSM) Lease(port int) (PortLease, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l, ok := f.st.leases[port]
	return l, ok
}

// Leases returns every lease sorted by port.
func (f *FSM) Leases() []PortLease {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.sortedLeases()
}

// Tokens returns the machine tokens sorted by machine.
func (f *FSM) Tokens() []MemberToken {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.sortedTokens()
}

// MachineForToken returns the machine whose token has the SHA-256 sum. The
// lookup is by hash and the final comparison constant-time.
func (f *FSM) MachineForToken(sum [32]byte) (string, bool) {
	key := hex.EncodeToString(sum[:])
	f.mu.RLock()
	defer f.mu.RUnlock()
	machine, ok := f.st.byHash[key]
	if !ok {
		return "", false
	}
	stored, err := hex.DecodeString(f.st.tokens[machine].SHA256)
	if err != nil || subtle.ConstantTimeCompare(stored, sum[:]) != 1 {
		return "", false
	}
	return machine, true
}

// Candidates returns the candidate directory sorted by machine (empty before
// format 2).
func (f *FSM) Candidates() []Candidate {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.sortedCandidates()
}

// Limits returns the abuse limits in force (defaults filled in).
func (f *FSM) Limits() Limits {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.limits.EffectiveLimits()
}

// Counts returns the size of each table.
func (f *FSM) Counts() Counts {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Counts{Resources: f.st.resources.Len(), Leases: len(f.st.leases), Tokens: len(f.st.tokens), Candidates: len(f.st.candidates)}
}

// NextExpiry returns the earliest expiresAt of any record, and false when
// there is none. The leader's sweep loop uses it; it costs O(log n).
func (f *FSM) NextExpiry() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.nextExpiry()
}

// Hash returns the SHA-256 (hex) of the canonical encoding of the state.
// Replicas that applied the same log prefix have the same hash.
func (f *FSM) Hash() string {
	_, h := f.AppliedHash()
	return h
}

// AppliedHash returns the applied index and the state hash read together, so
// two replicas reporting the same index can be compared by hash. The state is
// copied in O(1) under the lock and hashed outside it.
func (f *FSM) AppliedHash() (uint64, string) {
	v, applied := f.view()
	h := sha256.New()
	if err := v.write(h, 0); err != nil {
		return applied, ""
	}
	return applied, hex.EncodeToString(h.Sum(nil))
}
