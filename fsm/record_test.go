package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/btree"
)

// recordCases are resources whose strings take every path of
// appendJSONString: plain ASCII, the characters encoding/json escapes
// (quotes, backslashes, control characters, U+2028, invalid UTF-8) and those
// it leaves alone without HTML escaping (<, >, &, non-ASCII letters).
var recordCases = []Resource{
	{ID: "machine:mbp", Kind: "machine", Name: "mbp", Machine: "mbp", Owner: "b000000000000000",
		Attrs: attrs(`{"load":{"loadAvg":[0.5,0.25,0.125],"cpuCount":4},"duties":["build"]}`), ObservedAt: 1, TTLMs: 600000,
		RegisteredAt: 2, RenewedAt: 3, ExpiresAt: 4, Revision: 5},
	{ID: "instance:mbp/1", Kind: "instance", Name: "nexus", Machine: "mbp", Endpoint: "http://10.0.0.9:31414?a=<b>&c",
		Attrs: map[string]json.RawMessage{}, TTLMs: 1, ExpiresAt: -9, Revision: 1 << 63},
	{ID: `q"uo\te`, Kind: "k\n\t\x01", Name: "ünïcødé \u2028 \u2029", Machine: "m\x7f", Owner: "\xff\xfe",
		Attrs: attrs(`{"<html>":"a&b","z":null,"a":[1,{"x":"\u00e9"}]}`)},
	{ID: "", Attrs: nil},
}

// appendJSON must write exactly the bytes encoding/json writes for the
// Resource, and resource() must give the Resource back.
func TestRecord_AppendJSON(t *testing.T) {
	for _, r := range recordCases {
		checkRecord(t, r)
	}
}

func checkRecord(t *testing.T, r Resource) {
	t.Helper()
	rec, err := storedRecord(&r)
	if err != nil {
		t.Fatalf("storedRecord(%+v) error = %v", r, err)
	}
	stored := r
	if stored.Attrs == nil {
		stored.Attrs = map[string]json.RawMessage{}
	}
	want, err := marshalJSON(stored)
	if err != nil {
		t.Fatalf("marshalJSON(%+v) error = %v", stored, err)
	}
	if got := rec.appendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("appendJSON() = %s\nwant %s", got, want)
	}
	back := rec.resource()
	if gotJSON, _ := marshalJSON(back); !bytes.Equal(gotJSON, want) {
		t.Fatalf("resource() = %s, want %s", gotJSON, want)
	}
	if back.Attrs == nil {
		t.Fatalf("resource().Attrs = nil, want a map")
	}
}

func FuzzRecord_AppendJSON(f *testing.F) {
	for _, r := range recordCases {
		a, _ := json.Marshal(r.Attrs)
		f.Add(r.ID, r.Kind, r.Name, r.Machine, r.Owner, r.Endpoint, a, r.ExpiresAt, r.Revision)
	}
	f.Fuzz(func(t *testing.T, id, kind, name, machine, owner, endpoint string, attrsJSON []byte, expiresAt int64, revision uint64) {
		var a map[string]json.RawMessage
		if json.Unmarshal(attrsJSON, &a) != nil {
			a = nil
		}
		checkRecord(t, Resource{ID: id, Kind: kind, Name: name, Machine: machine, Owner: owner, Endpoint: endpoint,
			Attrs: a, ExpiresAt: expiresAt, RenewedAt: -expiresAt, Revision: revision})
	})
}

// A machine's record holds its machine and name inside its id, and a
// heartbeat that leaves the attrs alone shares the stored text.
func TestRecord_NoDuplicateCopies(t *testing.T) {
	h := newHarness(t)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	cmd := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
	cmd.Name = "mbp"
	cmd.Attrs = attrs(`{"load":1}`)
	h.mustApply(cmd)
	stored := func() *record {
		h.f.mu.RLock()
		defer h.f.mu.RUnlock()
		r, ok := h.f.st.resource("machine:mbp")
		if !ok {
			t.Fatalf("machine:mbp is not stored")
		}
		return r
	}
	r := stored()
	if want := len("machine:mbp") + len(`{"load":1}`); len(r.text) != want {
		t.Errorf("record text = %q (%d bytes), want the id and the attrs only (%d bytes)", r.text, len(r.text), want)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"})
	r2 := stored()
	if r2 == r || unsafe.StringData(r2.text) != unsafe.StringData(r.text) {
		t.Errorf("a heartbeat without attrs stored a copy of the text (record %p → %p)", r, r2)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 2}, Caller: memberCaller, ID: "machine:mbp", Attrs: attrs(`{"seats":2}`)})
	if got := stored().attrs(); got != `{"load":1,"seats":2}` {
		t.Errorf("attrs after a heartbeat with attrs = %s, want the merge", got)
	}
	checkIndexes(t, h.f, "after the heartbeats")
}

// readSnapshot must decode every document as decoding it whole into a
// document does: the same state, or an error for both.
func TestReadSnapshot_AsDecode(t *testing.T) {
	docs := map[string][]byte{
		"rich":          persist(t, rich(t).f),
		"format 2 rich": persist(t, format2Rich(t).f),
	}
	fixtures, err := filepath.Glob(filepath.Join("testdata", "format", "v*", "snapshot.json"))
	if err != nil || len(fixtures) < 2 {
		t.Fatalf("the format fixtures: %v, %v", fixtures, err)
	}
	for _, path := range fixtures {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read the fixture %s: %v", path, err)
		}
		docs["fixture "+filepath.Base(filepath.Dir(path))] = data
	}
	res := `[{"id":"machine:a","kind":"machine","machine":"a","ttlMs":5,"expiresAt":9,"attrs":{"x": [1, 2]}}]`
	for name, doc := range map[string]string{
		"resources last":       `{"version":1,"lastNow":3,"resources":` + res + `}`,
		"a name in other case": `{"version":1,"Resources":` + res + `}`,
		"an escaped name":      `{"version":1,"resourc\u0065s":` + res + `}`,
		"resources twice":      `{"version":1,"resources":` + res + `,"resources":[]}`,
		"resources null":       `{"version":2,"resources":null}`,
		"a null resource":      `{"version":2,"resources":[null]}`,
		"a duplicate id":       `{"version":2,"resources":[{"id":"a","machine":"m","expiresAt":5},{"id":"a","machine":"n","expiresAt":3}]}`,
		"data after it":        `{"version":1}{"version":9}`,
		"resources not a list": `{"version":1,"resources":{}}`,
		"a resource not a map": `{"version":1,"resources":[5]}`,
		"bad attrs":            `{"version":1,"resources":[{"id":"a","attrs":[1]}]}`,
		"cut short":            `{"version":1,"resources":[{"id":"a"}`,
		"not an object":        `[]`,
		"null":                 `null`,
		"an unknown member":    `{"version":1,"extra":{"a":[1]},"resources":[]}`,
		"a bad version":        `{"version":"1"}`,
		"nothing":              ``,
	} {
		docs[name] = []byte(doc)
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			got, gotErr := stateOfStream(doc)
			want, wantErr := stateOfWhole(doc)
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("readSnapshot error = %v, decoding it whole: %v", gotErr, wantErr)
			}
			if got != want {
				t.Errorf("readSnapshot state = %s\nwant %s", got, want)
			}
			// Strictly (ReadBackup), against the whole document decoded
			// strictly with every resource checked.
			b, gotErr := ReadBackup(bytes.NewReader(doc))
			want, wantErr = strictWhole(doc)
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("ReadBackup error = %v, decoding it whole: %v", gotErr, wantErr)
			}
			if gotErr == nil {
				var out strings.Builder
				if err := viewOf(b.st).write(&out, b.applied); err != nil || out.String() != want {
					t.Errorf("ReadBackup state = %s (%v)\nwant %s", out.String(), err, want)
				}
			}
		})
	}
}

// recordsOf stores the resources of a document decoded whole.
func recordsOf(rs []Resource) (*btree.BTreeG[*record], error) {
	tree := btree.NewG(btreeDegree, lessRecord)
	for i := range rs {
		rec, err := storedRecord(&rs[i])
		if err != nil {
			return nil, err
		}
		tree.ReplaceOrInsert(rec)
	}
	return tree, nil
}

// stateOfStream and stateOfWhole decode doc into a state, streamed or whole,
// and encode it again.
func stateOfStream(doc []byte) (string, error) {
	d, resources, err := readSnapshot(bytes.NewReader(doc), nil)
	if err != nil {
		return "", err
	}
	return encodedState(d, resources)
}

func stateOfWhole(doc []byte) (string, error) {
	var d document
	if err := json.NewDecoder(bytes.NewReader(doc)).Decode(&d); err != nil {
		return "", err
	}
	resources, err := recordsOf(d.Resources)
	if err != nil {
		return "", err
	}
	return encodedState(d, resources)
}

// strictWhole is ReadBackup decoding the whole document at once.
func strictWhole(doc []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	var d document
	if err := dec.Decode(&d); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err == nil {
		return "", errDataAfter
	}
	ids := map[string]bool{}
	for i := range d.Resources {
		if err := checkResource(&d.Resources[i]); err != nil || ids[d.Resources[i].ID] {
			return "", fmt.Errorf("resource %d: %v or given twice", i, err)
		}
		ids[d.Resources[i].ID] = true
	}
	if err := d.check(); err != nil {
		return "", err
	}
	resources, err := recordsOf(d.Resources)
	if err != nil {
		return "", err
	}
	return encodedState(d, resources)
}

func encodedState(d document, resources *btree.BTreeG[*record]) (string, error) {
	st, err := d.state(resources)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	if err := viewOf(st).write(&out, d.Applied); err != nil {
		return "", err
	}
	return out.String(), nil
}

// Persist of a snapshot gives the document of the state at Snapshot time
// however many entries Apply goes on with meanwhile (run with -race).
func TestSnapshot_PersistWhileApplying(t *testing.T) {
	h := rich(t)
	for i := range 200 {
		cmd := registerCmd(t0+60, memberCaller, "instance:mbp/"+strings.Repeat("x", i%7)+string(rune('a'+i%26)), "mbp")
		cmd.Kind = "instance"
		h.apply(cmd)
	}
	want := persist(t, h.f)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	sink := &fakeSink{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := snap.Persist(sink); err != nil {
			t.Errorf("Persist() error = %v", err)
		}
	}()
	ids := h.f.Resources("", "")
	for i := range 2000 {
		r := ids[i%len(ids)]
		h.apply(HeartbeatResource{Header: Header{Now: t0 + 70 + int64(i)}, Caller: memberCaller, ID: r.ID, Attrs: attrs(`{"beat":` + jsonOf(i) + `}`)})
		if i%100 == 0 {
			h.apply(DeleteResource{Header: Header{Now: t0 + 70 + int64(i)}, Caller: memberCaller, ID: r.ID})
		}
	}
	wg.Wait()
	if !bytes.Equal(sink.Bytes(), want) {
		t.Errorf("Persist() while applying wrote %d bytes that differ from the %d of the state at Snapshot time", sink.Len(), len(want))
	}
	g := New()
	if err := restore(t, g, sink.Bytes()); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if !reflect.DeepEqual(persist(t, g), want) {
		t.Errorf("Persist() after Restore() differs from the persisted document")
	}
}
