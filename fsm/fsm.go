package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sort"
	"sync"
)

// state is the replicated data. It is only touched under FSM.mu.
type state struct {
	resources map[string]Resource
	leases    map[int]PortLease
	tokens    map[string]MemberToken // by machine
	byHash    map[string]string      // sha256 → machine, derived from tokens
	idem      map[string]idemRecord  // owner + "/" + Idempotency-Key → the grant it made
	primary   Primary
	lastNow   int64             // the latest applied time (Unix ms)
	indexes   [numTables]uint64 // log index of the last change to each table
}

func newState() *state {
	return &state{
		resources: map[string]Resource{},
		leases:    map[int]PortLease{},
		tokens:    map[string]MemberToken{},
		byHash:    map[string]string{},
		idem:      map[string]idemRecord{},
	}
}

// FSM implements raft.FSM over the elanous state. All exported methods are
// safe for concurrent use: raft calls Apply, Snapshot and Restore from its
// FSM goroutine while the API reads.
type FSM struct {
	mu      sync.RWMutex
	st      *state                   // guarded by mu
	applied uint64                   // last applied log index; guarded by mu
	watches [numTables]chan struct{} // closed on the table's next change; guarded by mu
}

// New returns an empty FSM.
func New() *FSM {
	f := &FSM{st: newState()}
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
	r, ok := f.st.resources[id]
	return r, ok
}

// Resources returns the resources matching kind and machine ("" matches all),
// sorted by id.
func (f *FSM) Resources(kind, machine string) []Resource {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Resource, 0, len(f.st.resources))
	for _, r := range f.st.resources {
		if (kind == "" || r.Kind == kind) && (machine == "" || r.Machine == machine) {
			out = append(out, r)
		}
	}
	sortResources(out)
	return out
}

func sortResources(rs []Resource) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
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
	return sortedLeases(f.st.leases)
}

// Tokens returns the machine tokens sorted by machine.
func (f *FSM) Tokens() []MemberToken {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedTokens(f.st.tokens)
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

// Counts returns the size of each table.
func (f *FSM) Counts() Counts {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Counts{Resources: len(f.st.resources), Leases: len(f.st.leases), Tokens: len(f.st.tokens)}
}

// NextExpiry returns the earliest expiresAt of any record, and false when
// there is none. The leader's sweep loop uses it.
func (f *FSM) NextExpiry() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var next int64
	found := false
	for _, r := range f.st.resources {
		if !found || r.ExpiresAt < next {
			next, found = r.ExpiresAt, true
		}
	}
	for _, l := range f.st.leases {
		if !found || l.ExpiresAt < next {
			next, found = l.ExpiresAt, true
		}
	}
	return next, found
}

// Hash returns the SHA-256 (hex) of the canonical encoding of the state.
// Replicas that applied the same log prefix have the same hash.
func (f *FSM) Hash() string {
	_, h := f.AppliedHash()
	return h
}

// AppliedHash returns the applied index and the state hash read together, so
// two replicas reporting the same index can be compared by hash.
func (f *FSM) AppliedHash() (uint64, string) {
	f.mu.RLock()
	doc, applied := f.documentLocked(), f.applied
	f.mu.RUnlock()
	data, err := marshalJSON(doc)
	if err != nil {
		return applied, ""
	}
	sum := sha256.Sum256(data)
	return applied, hex.EncodeToString(sum[:])
}

func sortedLeases(m map[int]PortLease) []PortLease {
	out := make([]PortLease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

func sortedTokens(m map[string]MemberToken) []MemberToken {
	out := make([]MemberToken, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Machine < out[j].Machine })
	return out
}
