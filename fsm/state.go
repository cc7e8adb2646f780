package fsm

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/elanous/elanous-node/wire"
	"github.com/google/btree"
)

// state is the replicated data and the indexes derived from it. It is only
// touched under FSM.mu, and only through the methods below, which keep the
// indexes in step with the records so that every command costs O(log n) or
// better in the state's size (ARCHITECTURE.md, "The state machine and its
// format"). The indexes are never part of a snapshot: Restore and a claim's
// rebase rebuild them.
type state struct {
	// resources is ordered by id. Records are immutable once stored (a change
	// stores a new *record), so a Clone of the tree is a consistent view.
	resources  *btree.BTreeG[*record]
	leases     map[int]PortLease
	tokens     map[string]MemberToken // by machine
	byHash     map[string]string      // sha256 → machine, derived from tokens
	idem       map[string]idemRecord  // owner + "/" + Idempotency-Key → the grant it made
	primary    Primary
	format     int                  // the format level: the snapshot version, the command types in use
	candidates map[string]Candidate // the candidate directory, by machine (format 2)
	limits     Limits               // the abuse limits as set (zero fields: defaults) (format 2)
	timeline   []TimelineEntry      // the last TimelineMax claims and membership changes, oldest first (format 4)
	lastNow    int64                // the latest applied time (Unix ms)
	indexes    [numTables]uint64    // log index of the last change to each table

	// The resource indexes hold the stored records themselves, ordered by
	// other keys: no copy of an id or machine name.
	resExpiry       *btree.BTreeG[*record] // every resource by (expiresAt, id)
	byMachine       *btree.BTreeG[*record] // every resource by (machine, id)
	leaseExpiry     *btree.BTreeG[expiry]  // every lease by (expiresAt, port)
	idemExpiry      *btree.BTreeG[expiry]  // every remembered key by (until, key)
	leaseByKey      map[string][]int       // owner/key → sorted ports of leases granted under it
	occupied        portSet                // ports holding a lease record, live or due
	leasePerMachine map[string]int         // machine → leases naming it
}

// expiry is an entry of an expiry index: when, and which record.
type expiry struct {
	at   int64
	key  string // resource id or idempotency key
	port int    // lease port
}

func lessExpiry(a, b expiry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.port < b.port
}

// btreeDegree suits trees of a few to a few hundred thousand items.
const btreeDegree = 32

func newState() *state {
	return &state{
		resources:       btree.NewG(btreeDegree, lessRecord),
		leases:          map[int]PortLease{},
		tokens:          map[string]MemberToken{},
		byHash:          map[string]string{},
		idem:            map[string]idemRecord{},
		resExpiry:       btree.NewG(btreeDegree, lessRecordExpiry),
		leaseExpiry:     btree.NewG(btreeDegree, lessExpiry),
		idemExpiry:      btree.NewG(btreeDegree, lessExpiry),
		byMachine:       btree.NewG(btreeDegree, lessRecordMachine),
		leaseByKey:      map[string][]int{},
		format:          1,
		candidates:      map[string]Candidate{},
		leasePerMachine: map[string]int{},
	}
}

// resource returns the stored record with id.
func (st *state) resource(id string) (*record, bool) {
	return st.resources.Get(probe(id))
}

// putResource stores r, replacing any record with its id.
func (st *state) putResource(r *record) {
	if old, ok := st.resources.ReplaceOrInsert(r); ok {
		st.unindexResource(old)
	}
	st.indexResource(r)
}

func (st *state) indexResource(r *record) {
	st.resExpiry.ReplaceOrInsert(r)
	st.byMachine.ReplaceOrInsert(r)
}

// deleteResource removes the resource with id, if any.
func (st *state) deleteResource(id string) {
	if old, ok := st.resources.Delete(probe(id)); ok {
		st.unindexResource(old)
	}
}

func (st *state) unindexResource(r *record) {
	st.resExpiry.Delete(r)
	st.byMachine.Delete(r)
}

// resourcesPerMachine returns how many resources name machine: a walk of its
// records in the by-machine index, O(log n + k) for the k ≤
// ResourcesPerMachine records a quota allows it.
func (st *state) resourcesPerMachine(machine string) int {
	n := 0
	st.byMachine.AscendGreaterOrEqual(machineProbe(machine), func(r *record) bool {
		if r.machine() != machine {
			return false
		}
		n++
		return true
	})
	return n
}

// decrement lowers m[k], forgetting k at zero.
func decrement(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// machineResources returns the ids of machine's resources, sorted.
func (st *state) machineResources(machine string) []string {
	var ids []string
	st.byMachine.AscendGreaterOrEqual(machineProbe(machine), func(r *record) bool {
		if r.machine() != machine {
			return false
		}
		ids = append(ids, r.id())
		return true
	})
	return ids
}

// putLease stores l on its port, replacing any lease there.
func (st *state) putLease(l PortLease) {
	if old, ok := st.leases[l.Port]; ok {
		st.unindexLease(old)
	}
	st.leases[l.Port] = l
	st.leaseExpiry.ReplaceOrInsert(expiry{at: l.ExpiresAt, port: l.Port})
	st.occupied.set(l.Port)
	st.leasePerMachine[l.Machine]++
	if l.IdempotencyKey != "" {
		k := idemKey(l.Owner, l.IdempotencyKey)
		ports := st.leaseByKey[k]
		i, _ := slices.BinarySearch(ports, l.Port)
		st.leaseByKey[k] = slices.Insert(ports, i, l.Port)
	}
}

// deleteLease removes the lease on port, if any.
func (st *state) deleteLease(port int) {
	if old, ok := st.leases[port]; ok {
		st.unindexLease(old)
		delete(st.leases, port)
	}
}

func (st *state) unindexLease(l PortLease) {
	st.leaseExpiry.Delete(expiry{at: l.ExpiresAt, port: l.Port})
	st.occupied.clear(l.Port)
	decrement(st.leasePerMachine, l.Machine)
	if l.IdempotencyKey != "" {
		k := idemKey(l.Owner, l.IdempotencyKey)
		ports := st.leaseByKey[k]
		if i, found := slices.BinarySearch(ports, l.Port); found {
			ports = slices.Delete(ports, i, i+1)
		}
		if len(ports) == 0 {
			delete(st.leaseByKey, k)
		} else {
			st.leaseByKey[k] = ports
		}
	}
}

// putIdem remembers rec, replacing any record under its key.
func (st *state) putIdem(rec idemRecord) {
	if old, ok := st.idem[rec.Key]; ok {
		st.idemExpiry.Delete(expiry{at: old.Until, key: old.Key})
	}
	st.idem[rec.Key] = rec
	st.idemExpiry.ReplaceOrInsert(expiry{at: rec.Until, key: rec.Key})
}

func (st *state) deleteIdem(key string) {
	if old, ok := st.idem[key]; ok {
		st.idemExpiry.Delete(expiry{at: old.Until, key: old.Key})
		delete(st.idem, key)
	}
}

// putToken stores t, replacing the machine's previous token.
func (st *state) putToken(t MemberToken) {
	if old, ok := st.tokens[t.Machine]; ok {
		delete(st.byHash, old.SHA256)
	}
	st.tokens[t.Machine] = t
	st.byHash[t.SHA256] = t.Machine
}

func (st *state) deleteToken(machine string) {
	if old, ok := st.tokens[machine]; ok {
		delete(st.byHash, old.SHA256)
		delete(st.tokens, machine)
	}
}

// dueResources returns the ids of the resources expiring at or before now,
// in order.
func (st *state) dueResources(now int64) []string {
	var out []string
	st.resExpiry.Ascend(func(r *record) bool {
		if r.expiresAt > now {
			return false
		}
		out = append(out, r.id())
		return true
	})
	return out
}

// due returns the entries of an expiry index at or before now, in order.
func due(t *btree.BTreeG[expiry], now int64) []expiry {
	var out []expiry
	t.Ascend(func(e expiry) bool {
		if e.at > now {
			return false
		}
		out = append(out, e)
		return true
	})
	return out
}

// nextExpiry returns the earliest time a Sweep has work: the earliest
// expiresAt of a resource or lease, or the earliest end of a remembered
// Idempotency-Key, so keys are pruned even when no TTL is live.
func (st *state) nextExpiry() (int64, bool) {
	var next int64
	found := false
	if r, ok := st.resExpiry.Min(); ok {
		next, found = r.expiresAt, true
	}
	for _, t := range []*btree.BTreeG[expiry]{st.leaseExpiry, st.idemExpiry} {
		if e, ok := t.Min(); ok && (!found || e.at < next) {
			next, found = e.at, true
		}
	}
	return next, found
}

// anyLeaseDue reports whether a lease is due (expiresAt <= now) but not yet
// swept.
func (st *state) anyLeaseDue(now int64) bool {
	e, ok := st.leaseExpiry.Min()
	return ok && e.at <= now
}

// rebuildIndexes recomputes every derived index from the records.
func (st *state) rebuildIndexes() {
	st.resExpiry = btree.NewG(btreeDegree, lessRecordExpiry)
	st.leaseExpiry = btree.NewG(btreeDegree, lessExpiry)
	st.idemExpiry = btree.NewG(btreeDegree, lessExpiry)
	st.byMachine = btree.NewG(btreeDegree, lessRecordMachine)
	st.leaseByKey = map[string][]int{}
	st.occupied = portSet{}
	st.byHash = map[string]string{}
	st.leasePerMachine = map[string]int{}
	st.resources.Ascend(func(r *record) bool {
		st.indexResource(r)
		return true
	})
	leases := st.leases
	st.leases = make(map[int]PortLease, len(leases))
	for _, l := range leases {
		st.putLease(l)
	}
	idem := st.idem
	st.idem = make(map[string]idemRecord, len(idem))
	for _, rec := range idem {
		st.putIdem(rec)
	}
	for _, t := range st.tokens {
		st.byHash[t.SHA256] = t.Machine
	}
}

// sortedLeases returns the leases sorted by port.
func (st *state) sortedLeases() []PortLease {
	return sortedValues(st.leases, func(l PortLease) int { return l.Port })
}

// sortedTokens returns the tokens sorted by machine.
func (st *state) sortedTokens() []MemberToken {
	return sortedValues(st.tokens, func(t MemberToken) string { return t.Machine })
}

// sortedCandidates returns the candidate directory sorted by machine.
func (st *state) sortedCandidates() []Candidate {
	return sortedValues(st.candidates, func(c Candidate) string { return c.Machine })
}

// sortedIdem returns the remembered keys sorted by key (nil when none, as
// the snapshot document omits an empty list).
func (st *state) sortedIdem() []idemRecord {
	if len(st.idem) == 0 {
		return nil
	}
	return sortedValues(st.idem, func(r idemRecord) string { return r.Key })
}

// sortedValues returns m's values sorted by key (empty, not nil, when m is).
func sortedValues[K comparable, V any, O cmp.Ordered](m map[K]V, key func(V) O) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b V) int { return cmp.Compare(key(a), key(b)) })
	return out
}

// portSet is a set of ports as a bitmap: 8 KiB for every possible port.
type portSet [(wire.MaxPort + 1) / 64]uint64

func (s *portSet) set(p int)   { s[p>>6] |= 1 << (uint(p) & 63) }
func (s *portSet) clear(p int) { s[p>>6] &^= 1 << (uint(p) & 63) }

// nextFree returns the lowest port ≥ from and ≤ to that is not in the set,
// or -1. It looks at 64 ports per step.
func (s *portSet) nextFree(from, to int) int {
	for p := from; p <= to; {
		w := ^s[p>>6] >> (uint(p) & 63) // free ports from p within its word
		if w != 0 {
			if q := p + bits.TrailingZeros64(w); q <= to {
				return q
			}
			return -1
		}
		p = (p | 63) + 1
	}
	return -1
}
