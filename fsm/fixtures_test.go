package fsm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// The format fixtures pin what a released build wrote. testdata/format/vN
// holds, for snapshot format N: entries.json, a log with an entry of every
// command type that format knows (plus a malformed body and a skippable
// entry), each as the exact bytes the leader proposed; snapshot.json, the
// exact bytes Persist wrote after that log; and expected.json, the state hash
// and counts the build computed. Fixtures are written once, by the build that
// introduces the format, and never rewritten once released (see
// ARCHITECTURE.md, "Versioned formats"):
//
//	go test ./fsm -run TestFormatFixtures -write-format-fixtures
//
// writes testdata/format/v<SnapshotVersion> and refuses to overwrite it.
var writeFixtures = flag.Bool("write-format-fixtures", false,
	"write testdata/format/v<SnapshotVersion> from this build instead of checking the fixtures (never overwrites)")

// fixtureEntry is one log entry: its raft index and term, its command type
// and its body as the exact bytes that followed the type byte.
type fixtureEntry struct {
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	Type  uint8  `json:"type"`
	Name  string `json:"name"` // the type's name, for readers; "" for an unknown type
	Body  string `json:"body"`
}

func (e fixtureEntry) log() *raft.Log {
	return &raft.Log{Index: e.Index, Term: e.Term, Type: raft.LogCommand, Data: append([]byte{e.Type}, e.Body...)}
}

// fixtureExpect is what the writing build computed.
type fixtureExpect struct {
	SnapshotVersion int     `json:"snapshotVersion"`
	AppliedIndex    uint64  `json:"appliedIndex"`
	StateHash       string  `json:"stateHash"`
	Counts          Counts  `json:"counts"`
	Primary         Primary `json:"primary"`
	LastNow         int64   `json:"lastNow"`
}

// fixtureLog is the log the fixtures of this build record: every command
// type, applied for real (grants, renewals, refusals, an expiry, a second
// leader's claim with a skewed clock).
func fixtureLog(t *testing.T) []fixtureEntry {
	h := newHarness(t)
	h.term = 2
	var out []fixtureEntry
	add := func(cmd Command) {
		t.Helper()
		data, err := Encode(cmd)
		if err != nil {
			t.Fatalf("Encode(%T) error = %v", cmd, err)
		}
		h.index++
		out = append(out, fixtureEntry{Index: h.index, Term: h.term, Type: data[0], Name: TypeName(CommandType(data[0])), Body: string(data[1:])})
	}
	raw := func(typ byte, body string) {
		h.index++
		out = append(out, fixtureEntry{Index: h.index, Term: h.term, Type: typ, Name: TypeName(CommandType(typ)), Body: body})
	}
	add(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	add(registerCmd(t0+10, mbpCaller, "machine:mbp", "mbp"))
	inst := registerCmd(t0+20, mbpCaller, "instance:mbp/1", "mbp")
	inst.Kind, inst.Endpoint = "instance", "http://10.0.0.9:31451"
	inst.Attrs = attrs(`{"load":0.5,"duties":["build","test"],"note":"<a&b> ü"}`)
	add(inst)
	add(HeartbeatResource{Header: Header{Now: t0 + 30}, Caller: mbpCaller, ID: "instance:mbp/1", Attrs: attrs(`{"load":0.7}`)})
	add(IssueToken{Header: Header{Now: t0 + 40}, Machine: "mbp", SHA256: tokenSumOne})
	acq := acquireCmd(t0+50, mbpCaller, "0a1b2c3d-0000-4000-8000-000000000001")
	acq.Excluded, acq.IdempotencyKey = []int{31450}, "idem-1"
	add(acq)
	add(acquireCmd(t0+60, memberCaller, "0a1b2c3d-0000-4000-8000-000000000002"))
	add(RenewLease{Header: Header{Now: t0 + 70}, Caller: mbpCaller, Port: 31451, LeaseID: "0a1b2c3d-0000-4000-8000-000000000001"})
	add(ReleaseLease{Header: Header{Now: t0 + 80}, Caller: memberCaller, Port: 31450, LeaseID: "0a1b2c3d-0000-4000-8000-000000000002"})
	// Refused: another lease id (409), and a machine token out of its machine (403).
	add(RenewLease{Header: Header{Now: t0 + 90}, Caller: mbpCaller, Port: 31451, LeaseID: "other"})
	add(registerCmd(t0+95, mbpCaller, "machine:studio", "studio"))
	add(IssueToken{Header: Header{Now: t0 + 100}, Machine: "studio", SHA256: tokenSumTwo})
	add(RevokeToken{Header: Header{Now: t0 + 110}, Machine: "studio"})
	short := registerCmd(t0+120, memberCaller, "machine:short", "short")
	short.TTLMs = 1000
	add(short)
	add(registerCmd(t0+130, memberCaller, "machine:gone", "gone"))
	add(DeleteResource{Header: Header{Now: t0 + 140}, Caller: memberCaller, ID: "machine:gone"})
	add(Sweep{Header: Header{Now: t0 + 5000}})
	raw(byte(HeartbeatResourceType), `{"now":`) // a body that does not decode: a no-op
	raw(byte(SkipBit|0x11), `{"future":true}`)  // a type a later version may add, skippable
	// A new leader whose clock is an hour behind: every TTL is rebased.
	h.term = 3
	add(ClaimPrimary{Header: Header{Now: t0 - 3_600_000}, Holder: "node-b", GraceMs: 1000})
	add(HeartbeatResource{Header: Header{Now: t0 - 3_590_000}, Caller: mbpCaller, ID: "machine:mbp"})
	add(Sweep{Header: Header{Now: t0 - 3_580_000}})
	// Format 2: the level is raised, then commands share entries, the
	// directory and the limits are set, quotas and revoked tokens refuse.
	add(SetFormat{Header: Header{Now: t0 - 3_570_000}, Level: 2})
	add(PutCandidate{Header: Header{Now: t0 - 3_569_000}, Candidate: Candidate{Machine: "node-a", URL: "https://10.0.0.1:31413", Raft: "10.0.0.1:31412", Voter: true}})
	add(PutCandidate{Header: Header{Now: t0 - 3_569_000}, Candidate: Candidate{Machine: "node-b", URL: "https://10.0.0.2:31413", Raft: "10.0.0.2:31412", Voter: true}})
	add(PutCandidate{Header: Header{Now: t0 - 3_569_000}, Candidate: Candidate{Machine: "node-d", URL: "https://10.0.0.4:31413", Raft: "10.0.0.4:31412"}})
	add(RemoveCandidate{Header: Header{Now: t0 - 3_568_000}, Machine: "node-d"})
	add(SetLimits{Header: Header{Now: t0 - 3_567_000}, Limits: Limits{ResourcesPerMachine: 2, LeasesPerMachine: 1, IdempotencyKeys: 1}})
	squat := registerCmd(t0-3_566_000, memberCaller, "machine:other", "mbp") // a machine id naming another machine
	add(squat)
	mbpToken := mbpCaller
	mbpToken.TokenSHA256 = tokenSumOne
	add(registerCmd(t0-3_566_000, mbpToken, "instance:mbp/2", "mbp"))                                 // mbp's third resource: over its quota of 2
	add(HeartbeatResource{Header: Header{Now: t0 - 3_566_000}, Caller: mbpCaller, ID: "machine:mbp"}) // no token hash: refused
	add(HeartbeatResource{Header: Header{Now: t0 - 3_566_000}, Caller: mbpToken, ID: "machine:mbp"})
	idemA := acquireCmd(t0-3_565_000, otherCaller, "0a1b2c3d-0000-4000-8000-000000000005")
	idemA.IdempotencyKey = "idem-a"
	add(idemA)
	idemB := acquireCmd(t0-3_564_000, memberCaller, "0a1b2c3d-0000-4000-8000-000000000006")
	idemB.Machine, idemB.IdempotencyKey = "other-machine", "idem-b" // past the bound of 1 key: the oldest goes
	add(idemB)
	retryB := idemB // its retry a second later: the lease back, renewed from the retry
	retryB.Now, retryB.LeaseID = t0-3_563_000, "0a1b2c3d-0000-4000-8000-000000000007"
	add(retryB)
	batch := mustBatch(t0-3_560_000,
		registerCmd(t0-3_560_010, memberCaller, "machine:batched", "batched"),
		HeartbeatResource{Header: Header{Now: t0 - 3_560_005}, Caller: mbpCaller, ID: "instance:mbp/1"},
		acquireCmd(t0-3_560_002, memberCaller, "0a1b2c3d-0000-4000-8000-000000000003"),
		RenewLease{Header: Header{Now: t0 - 3_560_001}, Caller: mbpCaller, Port: 31451, LeaseID: "not-mine"},
		DeleteResource{Header: Header{Now: t0 - 3_560_000}, Caller: memberCaller, ID: "machine:none"},
	)
	// Refused inside a batch: a second acquire, a claim, a body that does not decode.
	second, err := marshalJSON(acquireCmd(t0-3_560_000, memberCaller, "0a1b2c3d-0000-4000-8000-000000000004"))
	if err != nil {
		t.Fatal(err)
	}
	batch.Commands = append(batch.Commands,
		BatchItem{Type: AcquireLeaseType, Body: second},
		BatchItem{Type: ClaimPrimaryType, Body: []byte(`{"now":1,"holder":"node-c","graceMs":0}`)},
		BatchItem{Type: RegisterResourceType, Body: []byte(`"not an object"`)},
	)
	add(batch)
	add(mustBatch(t0-3_550_000, ReleaseLease{Header: Header{Now: t0 - 3_550_000}, Caller: memberCaller, Port: 31450, LeaseID: "0a1b2c3d-0000-4000-8000-000000000003"}))
	add(Sweep{Header: Header{Now: t0 - 3_540_000}})
	// Format 3: renewals carry a slack; a renewal never moves an expiry
	// earlier, and a negative slack is refused.
	add(SetFormat{Header: Header{Now: t0 - 3_530_000}, Level: 3})
	add(HeartbeatResource{Header: Header{Now: t0 - 3_529_000}, Caller: mbpToken, ID: "machine:mbp", SlackMs: 15_000})
	add(HeartbeatResource{Header: Header{Now: t0 - 3_528_000}, Caller: mbpToken, ID: "machine:mbp"}) // keeps the slack's expiry
	add(HeartbeatResource{Header: Header{Now: t0 - 3_527_000}, Caller: mbpToken, ID: "machine:mbp", SlackMs: -1})
	add(mustBatch(t0-3_526_000,
		RenewLease{Header: Header{Now: t0 - 3_526_000}, Caller: mbpToken, Port: 31451, LeaseID: "0a1b2c3d-0000-4000-8000-000000000001", SlackMs: 10_000_000}, // capped at the TTL
		HeartbeatResource{Header: Header{Now: t0 - 3_526_000}, Caller: mbpToken, ID: "machine:mbp", Attrs: attrs(`{"load":0.9}`), SlackMs: 1000},
	))
	// Format 4: claims and candidate changes enter the timeline; a put that
	// changes nothing it records adds no entry.
	add(SetFormat{Header: Header{Now: t0 - 3_520_000}, Level: 4})
	h.term = 4
	add(ClaimPrimary{Header: Header{Now: t0 - 3_519_000}, Holder: "node-a", GraceMs: 1000})
	add(PutCandidate{Header: Header{Now: t0 - 3_518_000}, Candidate: Candidate{Machine: "node-e", URL: "https://10.0.0.5:31413", Raft: "10.0.0.5:31412"}})
	add(PutCandidate{Header: Header{Now: t0 - 3_517_000}, Candidate: Candidate{Machine: "node-e", URL: "https://10.0.0.5:31413", Raft: "10.0.0.5:31412", Voter: true}})
	add(PutCandidate{Header: Header{Now: t0 - 3_516_000}, Candidate: Candidate{Machine: "node-e", URL: "https://10.0.0.5:31413", Raft: "10.0.0.5:31412", Voter: true}})
	add(PutCandidate{Header: Header{Now: t0 - 3_515_000}, Candidate: Candidate{Machine: "node-e", URL: "https://10.0.0.6:31413", Raft: "10.0.0.6:31412", Voter: true}})
	add(PutCandidate{Header: Header{Now: t0 - 3_514_000}, Candidate: Candidate{Machine: "node-e", URL: "https://10.0.0.6:31413", Raft: "10.0.0.6:31412"}})
	add(RemoveCandidate{Header: Header{Now: t0 - 3_513_000}, Machine: "node-e"})
	add(RemoveCandidate{Header: Header{Now: t0 - 3_512_000}, Machine: "node-e"}) // not found: no entry
	return out
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func replayFixture(t *testing.T, entries []fixtureEntry) *FSM {
	t.Helper()
	f := New()
	for _, e := range entries {
		f.Apply(e.log())
	}
	return f
}

func TestFormatFixtures(t *testing.T) {
	if *writeFixtures {
		writeFormatFixtures(t)
		return
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "format", "v*"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("v%d", SnapshotVersion)
	if !slices.Contains(dirs, filepath.Join("testdata", "format", want)) {
		t.Fatalf("no fixtures for the current snapshot format %s in testdata/format (have %v): a format change needs its fixtures, "+
			"written once with -write-format-fixtures", want, dirs)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { checkFormatFixtures(t, dir) })
	}
}

// checkFormatFixtures proves that this build reads what the build of dir's
// format wrote exactly as that build did: every entry decodes and re-encodes
// to its bytes, replaying the log gives the recorded state hash, restoring the
// recorded snapshot gives the same hash, and persisting that state again
// gives the recorded bytes.
func checkFormatFixtures(t *testing.T, dir string) {
	var entries []fixtureEntry
	var want fixtureExpect
	readJSONFile(t, filepath.Join(dir, "entries.json"), &entries)
	readJSONFile(t, filepath.Join(dir, "expected.json"), &want)
	snapshot, err := os.ReadFile(filepath.Join(dir, "snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}

	seen := map[CommandType]bool{}
	for _, e := range entries {
		typ := CommandType(e.Type)
		cmd, known, err := Decode(e.log().Data)
		switch {
		case typ&SkipBit != 0 || e.Name == "":
			continue
		case !known:
			t.Errorf("entry %d: type %d (%s) is no longer known", e.Index, e.Type, e.Name)
			continue
		case TypeName(typ) != e.Name:
			t.Errorf("entry %d: type %d is named %q now, %q when the fixture was written: a type's meaning never changes", e.Index, e.Type, TypeName(typ), e.Name)
		}
		if err != nil {
			continue // the fixture's malformed body must stay malformed
		}
		seen[typ] = true
		again, err := Encode(cmd)
		if err != nil || !bytes.Equal(again, e.log().Data) {
			t.Errorf("entry %d (%s): Encode(Decode()) = %q, %v, want %q", e.Index, e.Name, again, err, e.log().Data)
		}
	}
	if dir == filepath.Join("testdata", "format", fmt.Sprintf("v%d", SnapshotVersion)) {
		for typ, sp := range commandTable {
			if !seen[typ] {
				t.Errorf("the fixtures of the current format have no entry of type %d (%s)", typ, sp.name)
			}
		}
	}

	replayed := replayFixture(t, entries)
	if got := replayed.Hash(); got != want.StateHash {
		t.Errorf("replayed log: Hash() = %s, want %s", got, want.StateHash)
	}
	if got := replayed.AppliedIndex(); got != want.AppliedIndex {
		t.Errorf("replayed log: AppliedIndex() = %d, want %d", got, want.AppliedIndex)
	}
	if got := replayed.Counts(); got != want.Counts {
		t.Errorf("replayed log: Counts() = %+v, want %+v", got, want.Counts)
	}
	if got := replayed.Primary(); got != want.Primary {
		t.Errorf("replayed log: Primary() = %+v, want %+v", got, want.Primary)
	}
	if got := replayed.LastNow(); got != want.LastNow {
		t.Errorf("replayed log: LastNow() = %d, want %d", got, want.LastNow)
	}

	restored := New()
	if err := restore(t, restored, snapshot); err != nil {
		t.Fatalf("Restore(%s/snapshot.json) error = %v", dir, err)
	}
	if got := restored.Hash(); got != want.StateHash {
		t.Errorf("restored snapshot: Hash() = %s, want %s", got, want.StateHash)
	}
	if got := restored.AppliedIndex(); got != want.AppliedIndex {
		t.Errorf("restored snapshot: AppliedIndex() = %d, want %d", got, want.AppliedIndex)
	}
	if got := persist(t, restored); !bytes.Equal(got, snapshot) {
		t.Errorf("Persist(restored) =\n%s\nwant the fixture's bytes\n%s", got, snapshot)
	}
}

func writeFormatFixtures(t *testing.T) {
	dir := filepath.Join("testdata", "format", fmt.Sprintf("v%d", SnapshotVersion))
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists: fixtures are never rewritten; a format change needs a new version", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries := fixtureLog(t)
	f := replayFixture(t, entries)
	writeJSONFile(t, filepath.Join(dir, "entries.json"), entries)
	if err := os.WriteFile(filepath.Join(dir, "snapshot.json"), persist(t, f), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSONFile(t, filepath.Join(dir, "expected.json"), fixtureExpect{
		SnapshotVersion: SnapshotVersion, AppliedIndex: f.AppliedIndex(), StateHash: f.Hash(),
		Counts: f.Counts(), Primary: f.Primary(), LastNow: f.LastNow(),
	})
	t.Logf("wrote %s: %d entries, state hash %s", dir, len(entries), f.Hash())
}
