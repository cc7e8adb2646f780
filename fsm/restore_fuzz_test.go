package fsm

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

// restoreSeeds are hand-made snapshot documents at the edges of what Restore
// must refuse or accept, beside the fixtures and persisted states. The
// documents that found bugs are in testdata/fuzz/FuzzFSM_Restore.
var restoreSeeds = []string{
	``, `null`, `{}`, `[]`, `{"version":0}`, `{"version":3}`, `{"version":1}`, `{"version":2}`, `{"version":1}{}`,
	`{"version":2,"resources":[{"id":"a","machine":"m","expiresAt":5},{"id":"a","machine":"n","expiresAt":3}]}`,
	`{"version":1,"leases":[{"port":31450,"leaseId":"a","idempotencyKey":"k","owner":"o"},{"port":31450,"leaseId":"b","idempotencyKey":"k","owner":"o"}]}`,
	`{"version":1,"tokens":[{"machine":"a","sha256":"zz"},{"machine":"a","sha256":"` + tokenSumTwo + `"}]}`,
	`{"version":2,"idempotency":[{"key":"o/k","port":31450,"leaseId":"l","until":9223372036854775807}],"lastNow":-9223372036854775808}`,
	`{"version":2,"indexes":[1,2,3,4,5,6,7,8],"primary":{"holder":"node-a","generation":18446744073709551615}}`,
	`{"version":2,"resources":[{"id":"machine:m","kind":"machine","machine":"m","attrs":{"a": [1, 2]},"expiresAt":9223372036854775807,"ttlMs":9223372036854775807}],"applied":18446744073709551615}`,
}

// FuzzFSM_Restore restores fuzzed snapshot documents (seeded with the
// committed format fixtures, persisted states and hand-made edge cases) into
// an FSM holding the baseline. Restore either refuses the document, leaving
// the state, the applied index and the watchers untouched, or accepts it
// into a state that is complete and consistent:
//   - its indexes agree with its records (checkIndexes);
//   - each machine token is found by its own hash;
//   - Persist → Restore gives a state with the same hash and the same reads,
//     and Persist of that gives the same bytes;
//   - the same commands applied to it and to its round-tripped copy give the
//     same results and the same hash (nothing Persist leaves out changes
//     what Apply does);
//   - every watcher was woken.
//
// Nothing may panic, in Restore or in the commands applied after it.
func FuzzFSM_Restore(f *testing.F) {
	for _, v := range []string{"v1", "v2"} {
		data, err := os.ReadFile(filepath.Join("testdata", "format", v, "snapshot.json"))
		if err != nil {
			f.Fatalf("read the %s fixture: %v", v, err)
		}
		f.Add(data)
	}
	for _, h := range []*harness{rich(f), format2Rich(f)} {
		f.Add(persist(f, h.f))
	}
	for _, s := range restoreSeeds {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, doc []byte) {
		h := newBaseline(t)
		before := capture(h.f)
		appliedBefore := h.f.AppliedIndex()
		var watches [numTables]<-chan struct{}
		for tb := range numTables {
			_, watches[tb] = h.f.Watch(tb)
		}
		if err := restore(t, h.f, doc); err != nil {
			if after := capture(h.f); after != before {
				t.Fatalf("a refused Restore (%v) changed the state:\n%s\nwant\n%s", err, after.tables, before.tables)
			}
			if got := h.f.AppliedIndex(); got != appliedBefore {
				t.Fatalf("a refused Restore (%v) moved AppliedIndex() %d → %d", err, appliedBefore, got)
			}
			for tb, ch := range watches {
				if isClosed(ch) {
					t.Fatalf("a refused Restore (%v) woke the watchers of table %d", err, tb)
				}
			}
			return
		}
		for tb, ch := range watches {
			if !isClosed(ch) {
				t.Fatalf("Restore() did not wake the watchers of table %d", tb)
			}
		}
		checkIndexes(t, h.f, "after Restore")
		for _, tok := range h.f.Tokens() {
			if !wire.ValidSHA256(tok.SHA256) {
				continue // not a stored hash (64 lowercase hex): no token matches it
			}
			sum, _ := hex.DecodeString(tok.SHA256)
			if m, ok := h.f.MachineForToken([32]byte(sum)); !ok || m != tok.Machine {
				t.Fatalf("MachineForToken(hash of %q's token) = %q, %v", tok.Machine, m, ok)
			}
		}

		data := persist(t, h.f)
		g := New()
		if err := restore(t, g, data); err != nil {
			t.Fatalf("Restore(Persist(restored)) error = %v\n%s", err, data)
		}
		if a, b := h.f.Hash(), g.Hash(); a != b {
			t.Fatalf("Hash() = %s after Restore, %s after Persist → Restore", a, b)
		}
		if again := persist(t, g); string(again) != string(data) {
			t.Fatalf("Persist is not stable:\n%s\nthen\n%s", data, again)
		}
		assertSameReads(t, h.f, g)

		// The same commands on both give the same results and hashes.
		gh := &harness{t: t, f: g, index: h.f.AppliedIndex(), term: h.term}
		h.index = h.f.AppliedIndex()
		for i, cmd := range restoreProbes(h.f) {
			ra, rb := h.apply(cmd), gh.apply(cmd)
			if da, db := describe(ra), describe(rb); da != db {
				t.Fatalf("probe %d (%T): Apply() = %s on the restored state, %s on its round trip", i, cmd, da, db)
			}
			if a, b := h.f.Hash(), g.Hash(); a != b {
				t.Fatalf("probe %d (%T): Hash() = %s on the restored state, %s on its round trip", i, cmd, a, b)
			}
		}
		checkIndexes(t, h.f, "after the probes")
	})
}

// format2Rich is rich at format level 2, with a candidate and limits.
func format2Rich(t testing.TB) *harness {
	h := rich(t)
	h.mustApply(SetFormat{Header: Header{Now: t0 + 60}, Level: 2})
	h.mustApply(PutCandidate{Header: Header{Now: t0 + 61}, Candidate: Candidate{Machine: "node-d", URL: "https://10.0.0.4:31413", Raft: "10.0.0.4:31412", Voter: true}})
	h.mustApply(SetLimits{Header: Header{Now: t0 + 62}, Limits: Limits{ResourcesPerMachine: 3, IdempotencyKeys: 2}})
	return h
}

// assertSameReads compares every read of two FSMs.
func assertSameReads(t *testing.T, a, b *FSM) {
	t.Helper()
	ea, oka := a.NextExpiry()
	eb, okb := b.NextExpiry()
	reads := []struct {
		name   string
		ga, gb any
	}{
		{"Resources", compactAttrs(a.Resources("", "")), compactAttrs(b.Resources("", ""))},
		{"Leases", a.Leases(), b.Leases()},
		{"Tokens", a.Tokens(), b.Tokens()},
		{"Candidates", a.Candidates(), b.Candidates()},
		{"Limits", a.Limits(), b.Limits()},
		{"Primary", a.Primary(), b.Primary()},
		{"Format", a.Format(), b.Format()},
		{"LastNow", a.LastNow(), b.LastNow()},
		{"AppliedIndex", a.AppliedIndex(), b.AppliedIndex()},
		{"Counts", a.Counts(), b.Counts()},
		{"NextExpiry", [2]any{ea, oka}, [2]any{eb, okb}},
	}
	for tb := range numTables {
		reads = append(reads, struct {
			name   string
			ga, gb any
		}{"Index", a.Index(tb), b.Index(tb)})
	}
	for _, r := range reads {
		if !reflect.DeepEqual(r.ga, r.gb) {
			t.Fatalf("%s() = %+v after Restore, %+v after Persist → Restore", r.name, r.ga, r.gb)
		}
	}
}

// compactAttrs returns rs with every attrs value compacted. A document may
// hold attrs with white space inside ("[1, 2]"), which Restore keeps and
// Persist compacts, as every encoding of attrs does (Hash, the API, the size
// check of wire.CheckAttrs): no reader can tell the two apart.
func compactAttrs(rs []Resource) []Resource {
	for i := range rs {
		m := make(map[string]json.RawMessage, len(rs[i].Attrs))
		for k, v := range rs[i].Attrs {
			var buf bytes.Buffer
			if err := json.Compact(&buf, v); err != nil {
				panic(err) // the document decoded, so every value is JSON
			}
			m[k] = buf.Bytes()
		}
		rs[i].Attrs = m
	}
	return rs
}

// restoreProbes are commands that read what a restored state holds: its
// tokens' hashes, its machines' quotas, its leases, the remembered keys, the
// candidate directory, and the rebase and sweep of every TTL.
func restoreProbes(f *FSM) []Command {
	now := f.LastNow()
	var cmds []Command
	for _, tok := range f.Tokens() {
		cmds = append(cmds, IssueToken{Header: Header{Now: now}, Machine: "probe", SHA256: tok.SHA256})
	}
	for _, r := range f.Resources("", "") {
		cmds = append(cmds,
			HeartbeatResource{Header: Header{Now: now}, Caller: Caller{Owner: r.Owner}, ID: r.ID, Attrs: attrs(`{"probe":1}`)},
			registerCmd(now, Caller{Owner: "probe"}, "machine:"+r.Machine, r.Machine))
	}
	owners := map[string]bool{memberCaller.Owner: true}
	for _, l := range f.Leases() {
		cmds = append(cmds, RenewLease{Header: Header{Now: now}, Caller: Caller{Owner: l.Owner}, Port: l.Port, LeaseID: l.LeaseID})
		owners[l.Owner] = true
	}
	for _, owner := range slices.Sorted(maps.Keys(owners)) {
		a := acquireCmd(now, Caller{Owner: owner}, "probe-lease-"+owner)
		a.IdempotencyKey = "idem-base"
		cmds = append(cmds, a)
	}
	cmds = append(cmds,
		acquireCmd(now, memberCaller, "probe-lease"),
		PutCandidate{Header: Header{Now: now}, Candidate: Candidate{Machine: "node-a", URL: "http://127.0.0.1:1", Raft: "127.0.0.1:2"}},
		RemoveCandidate{Header: Header{Now: now}, Machine: "node-d"},
		ClaimPrimary{Header: Header{Now: now + 1}, Holder: "node-c", GraceMs: 1000},
		Sweep{Header: Header{Now: now + 2*ttl}},
		Sweep{Header: Header{Now: now + 48*hour}},
	)
	return cmds
}
