package fsm

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/google/btree"
)

// ascendRecords lists the records of an index in its order, as pointers:
// an index holds the stored records themselves.
func ascendRecords(t *btree.BTreeG[*record]) []*record {
	var out []*record
	t.Ascend(func(r *record) bool { out = append(out, r); return true })
	return out
}

func ascend(t *btree.BTreeG[expiry]) []expiry {
	var out []expiry
	t.Ascend(func(e expiry) bool { out = append(out, e); return true })
	return out
}

// checkIndexes fails t when a derived index of f's state differs from the
// one rebuilt from its records, or when the fast paths (next expiry, free
// port) disagree with a walk over the records.
func checkIndexes(t *testing.T, f *FSM, at string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	want := &state{resources: st.resources.Clone(), leases: maps.Clone(st.leases), tokens: maps.Clone(st.tokens), idem: maps.Clone(st.idem)}
	want.rebuildIndexes()
	for name, pair := range map[string][2]*btree.BTreeG[*record]{
		"resExpiry": {st.resExpiry, want.resExpiry}, "byMachine": {st.byMachine, want.byMachine},
	} {
		if got, w := ascendRecords(pair[0]), ascendRecords(pair[1]); !slices.Equal(got, w) {
			t.Fatalf("%s: %s = %v, want %v", at, name, got, w)
		}
	}
	for name, pair := range map[string][2]*btree.BTreeG[expiry]{
		"leaseExpiry": {st.leaseExpiry, want.leaseExpiry}, "idemExpiry": {st.idemExpiry, want.idemExpiry},
	} {
		if got, w := ascend(pair[0]), ascend(pair[1]); !reflect.DeepEqual(got, w) {
			t.Fatalf("%s: %s = %v, want %v", at, name, got, w)
		}
	}
	if !reflect.DeepEqual(st.leaseByKey, want.leaseByKey) {
		t.Fatalf("%s: leaseByKey = %v, want %v", at, st.leaseByKey, want.leaseByKey)
	}
	if st.occupied != want.occupied {
		t.Fatalf("%s: the port bitmap differs from the leases %v", at, slices.Sorted(maps.Keys(st.leases)))
	}
	if !reflect.DeepEqual(st.byHash, want.byHash) {
		t.Fatalf("%s: byHash = %v, want %v", at, st.byHash, want.byHash)
	}
	// NextExpiry against a walk over every record.
	var next int64
	found := false
	st.resources.Ascend(func(r *record) bool {
		if !found || r.expiresAt < next {
			next, found = r.expiresAt, true
		}
		return true
	})
	for _, l := range st.leases {
		if !found || l.ExpiresAt < next {
			next, found = l.ExpiresAt, true
		}
	}
	for _, rec := range st.idem {
		if !found || rec.Until < next {
			next, found = rec.Until, true
		}
	}
	if !reflect.DeepEqual(st.leasePerMachine, want.leasePerMachine) {
		t.Fatalf("%s: per-machine lease counts = %v, want %v", at, st.leasePerMachine, want.leasePerMachine)
	}
	if got, ok := st.nextExpiry(); got != next || ok != found {
		t.Fatalf("%s: nextExpiry() = %d, %v, want %d, %v", at, got, ok, next, found)
	}
	// freePort against the plain walk of the band, at a few times and with
	// and without excluded ports.
	for _, now := range []int64{st.lastNow, st.lastNow + ttl, st.lastNow + 10*ttl} {
		for _, excl := range [][]int{nil, {bandLow, bandLow + 1}, {bandLow + 3}} {
			a := applier{st: st, now: now}
			c := AcquireLease{BandStart: bandLow, BandEnd: bandHigh, Excluded: excl}
			got, gotOK := a.freePort(c)
			wantPort, wantOK := 0, false
			for p := bandLow; p <= bandHigh; p++ {
				if slices.Contains(excl, p) {
					continue
				}
				if l, ok := st.leases[p]; ok && l.ExpiresAt > now {
					continue
				}
				wantPort, wantOK = p, true
				break
			}
			if got != wantPort || gotOK != wantOK {
				t.Fatalf("%s: freePort(now %d, excluded %v) = %d, %v, want %d, %v", at, now, excl, got, gotOK, wantPort, wantOK)
			}
		}
	}
}

func TestPortSet_NextFree(t *testing.T) {
	var s portSet
	for _, p := range []int{0, 1, 63, 64, 65, 127, 31450, 31451, 65535} {
		s.set(p)
	}
	tests := []struct{ from, to, want int }{
		{0, 10, 2},
		{63, 70, 66},
		{63, 65, -1},
		{127, 128, 128},
		{31450, 31499, 31452},
		{65535, 65535, -1},
		{65534, 65535, 65534},
		{100, 99, -1},
	}
	for _, tt := range tests {
		if got := s.nextFree(tt.from, tt.to); got != tt.want {
			t.Errorf("nextFree(%d, %d) = %d, want %d", tt.from, tt.to, got, tt.want)
		}
	}
	s.clear(31451)
	if got := s.nextFree(31450, 31499); got != 31451 {
		t.Errorf("nextFree after clear(31451) = %d, want 31451", got)
	}
	var full portSet
	for p := 31450; p <= 31499; p++ {
		full.set(p)
	}
	if got := full.nextFree(31450, 31499); got != -1 {
		t.Errorf("nextFree on a full band = %d, want -1", got)
	}
}
