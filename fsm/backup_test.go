package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// backupState is a format 2 state with something in every table: resources
// live and due, a lease with an Idempotency-Key, a token, a candidate and
// limits.
func backupState(t testing.TB) *harness {
	t.Helper()
	h := newBaseline(t)
	h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 2})
	h.mustApply(PutCandidate{Header: Header{Now: t0}, Candidate: Candidate{Machine: "node-a", URL: "http://10.0.0.1:31413", Raft: "10.0.0.1:31412", Voter: true}})
	h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: Limits{ResourcesPerMachine: 50}})
	short := registerCmd(t0+5, memberCaller, "machine:short", "short")
	short.TTLMs = 10
	h.mustApply(short)
	h.mustApply(registerCmd(t0+100, memberCaller, "machine:mbp", "mbp"))
	h.mustApply(Sweep{Header: Header{Now: t0 + 200}}) // lastNow t0+200; machine:short expired and swept
	due := registerCmd(t0+200, memberCaller, "machine:due", "due")
	due.TTLMs = 1
	h.mustApply(due)
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 300}, Caller: memberCaller, ID: "machine:mbp"}) // lastNow t0+300: machine:due is due, unswept
	return h
}

func TestFSM_ExportWritesThePersistedDocument(t *testing.T) {
	h := backupState(t)
	var buf bytes.Buffer
	e := h.f.Export()
	n, err := e.WriteTo(&buf)
	if err != nil {
		t.Fatalf("Export().WriteTo() error = %v", err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("WriteTo() = %d, wrote %d bytes", n, buf.Len())
	}
	if want := persist(t, h.f); !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Export().WriteTo() =\n%s\nwant Persist's\n%s", buf.Bytes(), want)
	}
	if e.Applied() != h.index || e.Format() != 2 || e.Primary() != h.f.Primary() || e.LastNow() != h.f.LastNow() {
		t.Errorf("Export() = applied %d format %d primary %+v lastNow %d, want %d 2 %+v %d",
			e.Applied(), e.Format(), e.Primary(), e.LastNow(), h.index, h.f.Primary(), h.f.LastNow())
	}
	if got, want := e.Counts(), h.f.Counts(); got != want {
		t.Errorf("Export().Counts() = %+v, want %+v", got, want)
	}
	// The copy does not move with later commands.
	h.mustApply(registerCmd(t0+400, memberCaller, "machine:later", "later"))
	var again bytes.Buffer
	if _, err := e.WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Errorf("Export().WriteTo() after a later command changed (err %v)", err)
	}
}

// exported returns the backup document of h's state.
func exported(t testing.TB, h *harness) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := h.f.Export().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBackup_RebaseIsTheClaimsRule(t *testing.T) {
	h := backupState(t)
	doc := exported(t, h)
	b, err := ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("ReadBackup() error = %v", err)
	}
	if b.Version() != 2 || b.Applied() != h.index || b.Counts() != h.f.Counts() || b.LastNow() != t0+300 {
		t.Fatalf("ReadBackup() = version %d applied %d counts %+v lastNow %d", b.Version(), b.Applied(), b.Counts(), b.LastNow())
	}
	if b.MaxIndex() != h.index {
		t.Errorf("MaxIndex() = %d, want %d", b.MaxIndex(), h.index)
	}
	cands := []Candidate{{Machine: "node-c", URL: "http://10.0.0.3:31413", Raft: "10.0.0.3:31412", Voter: true, AddedAt: t0 - 5}}
	p := RestoreParams{Holder: "node-c", Term: 9, Now: t0 + 86_400_000, GraceMs: 1000, Index: h.index + 40, Format: 2, Candidates: cands}
	out, err := b.Rebase(p)
	if err != nil {
		t.Fatalf("Rebase() error = %v", err)
	}
	restored := New()
	if err := restore(t, restored, out); err != nil {
		t.Fatalf("Restore(Rebase()) error = %v", err)
	}

	// The original state, claimed by the same holder at the same term,
	// index and time, holds exactly the same records.
	h.f.mu.Lock()
	h.f.st.candidates = map[string]Candidate{"node-c": cands[0]}
	h.f.mu.Unlock()
	h.index, h.term = p.Index-1, p.Term
	h.mustApply(ClaimPrimary{Header: Header{Now: p.Now}, Holder: p.Holder, GraceMs: p.GraceMs})
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Resources", restored.Resources("", ""), h.f.Resources("", "")},
		{"Leases", restored.Leases(), h.f.Leases()},
		{"Tokens", restored.Tokens(), h.f.Tokens()},
		{"Candidates", restored.Candidates(), cands},
		{"Limits", restored.Limits(), h.f.Limits()},
		{"Primary", restored.Primary(), Primary{Holder: "node-c", Generation: 9, ClaimedAt: p.Now, Index: p.Index}},
		{"LastNow", restored.LastNow(), p.Now},
		{"AppliedIndex", restored.AppliedIndex(), p.Index},
		{"Format", restored.Format(), 2},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s() after restore = %+v, want %+v", c.name, c.got, c.want)
		}
	}
	// Spelled out: remaining TTL plus the grace, a due record due at now,
	// leases keep id, lease id, generation and fence.
	mbp, _ := restored.Resource("machine:mbp")
	if want := p.Now + (t0 + 300 + ttl - (t0 + 300)) + p.GraceMs; mbp.ExpiresAt != want {
		t.Errorf("machine:mbp expiresAt = %d, want now + remaining + grace = %d", mbp.ExpiresAt, want)
	}
	if due, _ := restored.Resource("machine:due"); due.ExpiresAt != p.Now {
		t.Errorf("machine:due expiresAt = %d, want due at now %d", due.ExpiresAt, p.Now)
	}
	before, after := h.f.Leases(), restored.Leases()
	if len(after) != 1 || after[0].LeaseID != "lease-base" || after[0].Fence != before[0].Fence || after[0].Generation != baseTerm {
		t.Errorf("restored leases = %+v, want lease-base with fence %d and generation %d", after, before[0].Fence, baseTerm)
	}
	for tab := range numTables {
		if got := restored.Index(tab); got != p.Index {
			t.Errorf("Index(%d) after restore = %d, want %d (every table changed)", tab, got, p.Index)
		}
	}

	// Deterministic: the same backup and parameters give the same bytes.
	b2, err := ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b2.Rebase(p); err != nil || !bytes.Equal(again, out) {
		t.Errorf("a second Rebase() of the same backup differs (err %v)", err)
	}
	if _, err := b.Rebase(p); err == nil {
		t.Errorf("Rebase() a second time on one Backup = nil error, want refused")
	}
}

func TestBackup_RebaseFormats(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", "format", "v1", "snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	v2 := exported(t, backupState(t))
	cands := []Candidate{{Machine: "node-a", URL: "http://10.0.0.1:31413", Raft: "10.0.0.1:31412", Voter: true}}
	for _, tt := range []struct {
		name      string
		doc       []byte
		format    int
		wantErr   error
		wantCands int
	}{
		{"a format 1 backup into a format 1 cluster", v1, 1, nil, 0},
		{"a format 1 backup into a format 2 cluster takes the cluster's directory", v1, 2, nil, 1},
		{"a format 2 backup into a format 2 cluster", v2, 2, nil, 1},
		{"a format 2 backup into a format 1 cluster is refused", v2, 1, ErrSnapshotTooNew, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ReadBackup(bytes.NewReader(tt.doc))
			if err != nil {
				t.Fatalf("ReadBackup() error = %v", err)
			}
			out, err := b.Rebase(RestoreParams{Holder: "node-a", Term: 40, Now: t0, GraceMs: 1000, Index: b.MaxIndex() + 1, Format: tt.format, Candidates: cands})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Rebase() error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Rebase() error = %v", err)
			}
			f := New()
			if err := restore(t, f, out); err != nil {
				t.Fatalf("Restore() error = %v", err)
			}
			if f.Format() != tt.format || len(f.Candidates()) != tt.wantCands || f.Counts().Resources != b.Counts().Resources {
				t.Errorf("restored format %d, %d candidates, counts %+v; want %d, %d, %+v", f.Format(), len(f.Candidates()), f.Counts(), tt.format, tt.wantCands, b.Counts())
			}
			// The restored state persists to the bytes that were installed.
			if got := persist(t, f); !bytes.Equal(got, out) {
				t.Errorf("Persist() after restore =\n%s\nwant the installed\n%s", got, out)
			}
		})
	}
}

func TestBackup_RebaseRefusesAnIndexNotAboveTheBackup(t *testing.T) {
	b, err := ReadBackup(bytes.NewReader(exported(t, backupState(t))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Rebase(RestoreParams{Holder: "node-a", Term: 4, Now: t0, Index: b.MaxIndex(), Format: 2}); err == nil {
		t.Fatalf("Rebase(index = MaxIndex) = nil error, want refused")
	}
	if _, err := b.Rebase(RestoreParams{Holder: "Not A Candidate", Term: 4, Now: t0, Index: b.MaxIndex() + 1, Format: 2}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("Rebase(bad holder) error = %v, want %v", err, ErrInvalidCommand)
	}
}

func TestReadBackup_Refuses(t *testing.T) {
	good := string(exported(t, backupState(t)))
	v1, err := os.ReadFile(filepath.Join("testdata", "format", "v1", "snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBackup(strings.NewReader(good)); err != nil {
		t.Fatalf("ReadBackup(good) error = %v", err)
	}
	if _, err := ReadBackup(bytes.NewReader(v1)); err != nil {
		t.Fatalf("ReadBackup(v1 fixture) error = %v", err)
	}
	replace := func(from, to string) string {
		t.Helper()
		if !strings.Contains(good, from) {
			t.Fatalf("the document has no %q", from)
		}
		return strings.Replace(good, from, to, 1)
	}
	for _, tt := range []struct{ name, doc string }{
		{"empty", ""},
		{"not JSON", "PK\x03\x04 a zip file"},
		{"another JSON document", `{"name":"a package.json","version":"1.0.0"}`},
		{"truncated", good[:len(good)/2]},
		{"trailing data", good + `{}`},
		{"an unknown field", replace(`"version":2,`, `"version":2,"extra":1,`)},
		{"version 0", replace(`"version":2,`, `"version":0,`)},
		{"a version from the future", replace(`"version":2,`, fmt.Sprintf(`"version":%d,`, MaxFormat+1))},
		{"a resource twice", replace(`"resources":[`, `"resources":[{"id":"machine:mbp","kind":"machine","name":"mbp","machine":"mbp","owner":"","attrs":{},"observedAt":0,"ttlMs":1,"registeredAt":0,"renewedAt":0,"expiresAt":0,"revision":1},`)},
		{"a resource without id", replace(`"id":"machine:base"`, `"id":""`)},
		{"a resource ttl out of range", replace(`"ttlMs":600000,"registeredAt"`, `"ttlMs":0,"registeredAt"`)},
		{"a lease on port 0", replace(`"port":31450,`, `"port":0,`)},
		{"a lease id that is not its port's", replace(`"id":"port-lease:31450"`, `"id":"port-lease:1"`)},
		{"a lease without fence", replace(`"fence":3`, `"fence":0`)},
		{"a token hash that is not hex", replace(`"sha256":"`+tokenSumThree+`"`, `"sha256":"xyz"`)},
		{"a bad candidate", replace(`"machine":"node-a","url":"http://10.0.0.1:31413"`, `"machine":"node-a","url":"ftp://x"`)},
		{"negative limits", replace(`"resourcesPerMachine":50`, `"resourcesPerMachine":-1`)},
		{"too many table indexes", replace(`"indexes":[`, `"indexes":[1,2,3,4,5,`)},
		{"a bad primary holder", replace(`"holder":"node-a"`, `"holder":"Node A"`)},
		{"format 2 content in a version 1 document", strings.Replace(string(v1), `"lastNow"`, `"candidates":[{"machine":"node-a","url":"http://10.0.0.1:31413","raft":"10.0.0.1:31412","voter":true,"addedAt":0}],"lastNow"`, 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadBackup(strings.NewReader(tt.doc)); !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("ReadBackup() error = %v, want %v", err, ErrInvalidSnapshot)
			}
		})
	}
}

// FuzzReadBackup checks that no input panics the restore side, that
// ReadBackup refuses only with ErrInvalidSnapshot, and that whatever it
// accepts rebases into a document every replica restores: raft panics a
// replica whose Restore fails, so the check must come before Raft.
func FuzzReadBackup(f *testing.F) {
	f.Add(exported(f, backupState(f)))
	if v1, err := os.ReadFile(filepath.Join("testdata", "format", "v1", "snapshot.json")); err == nil {
		f.Add(v1)
	}
	for _, seed := range []string{"", "{}", `{"version":1}`, `{"version":2,"resources":null,"leases":[{}]}`, `{"version":1,"lastNow":-9223372036854775808}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadBackup(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("ReadBackup() error = %v, want %v", err, ErrInvalidSnapshot)
			}
			return
		}
		out, err := b.Rebase(RestoreParams{Holder: "node-a", Term: 7, Now: t0, GraceMs: 1000, Index: b.MaxIndex() + 1, Format: MaxFormat})
		if err != nil {
			t.Fatalf("Rebase() of an accepted backup error = %v", err)
		}
		if err := New().Restore(&trackedReader{Reader: bytes.NewReader(out)}); err != nil {
			t.Fatalf("Restore(Rebase()) error = %v", err)
		}
	})
}
