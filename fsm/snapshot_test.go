package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// fakeSink is a raft.SnapshotSink over a buffer.
type fakeSink struct {
	bytes.Buffer
	writeErr  error
	closed    bool
	cancelled bool
}

var _ raft.SnapshotSink = (*fakeSink)(nil)

func (s *fakeSink) Write(p []byte) (int, error) {
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	return s.Buffer.Write(p)
}

func (s *fakeSink) Close() error  { s.closed = true; return nil }
func (s *fakeSink) ID() string    { return "fake-1" }
func (s *fakeSink) Cancel() error { s.cancelled = true; return nil }

// trackedReader records that Restore closed it.
type trackedReader struct {
	io.Reader
	closed bool
}

func (r *trackedReader) Close() error { r.closed = true; return nil }

// persist snapshots f into a buffer as raft would.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	defer snap.Release()
	sink := &fakeSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() error = %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("Persist() closed %v cancelled %v, want closed only", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func restore(t *testing.T, f *FSM, data []byte) error {
	t.Helper()
	rc := &trackedReader{Reader: bytes.NewReader(data)}
	err := f.Restore(rc)
	if !rc.closed {
		t.Errorf("Restore() did not close its reader")
	}
	return err
}

// rich builds a state with something in every table and field.
func rich(t testing.TB) *harness {
	h := newBaseline(t)
	for _, cmd := range sampleCommands()[:2] { // register and heartbeat an instance
		h.mustApply(cmd)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 10}, Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"seats":3}`)})
	acq := acquireCmd(t0+20, mbpCaller, "lease-mbp")
	acq.IdempotencyKey = "idem-mbp"
	h.mustApply(acq)
	short := acquireCmd(t0+20, otherCaller, "lease-short")
	short.TTLMs = 5
	h.mustApply(short)
	h.mustApply(IssueToken{Header: Header{Now: t0 + 30}, Machine: "mbp", SHA256: tokenSumOne})
	h.term++
	h.mustApply(ClaimPrimary{Header: Header{Now: t0 + 40}, Holder: "node-b", GraceMs: 1000})
	h.mustApply(Sweep{Header: Header{Now: t0 + 50}})
	return h
}

func TestFSM_SnapshotRestore(t *testing.T) {
	h := rich(t)
	data := persist(t, h.f)
	g := New()
	if err := restore(t, g, data); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}

	if got, want := g.Hash(), h.f.Hash(); got != want {
		t.Errorf("Hash() after restore = %s, want %s", got, want)
	}
	reads := []struct {
		name      string
		got, want any
	}{
		{"Resources", g.Resources("", ""), h.f.Resources("", "")},
		{"Resources(instance)", g.Resources("instance", "mbp"), h.f.Resources("instance", "mbp")},
		{"Leases", g.Leases(), h.f.Leases()},
		{"Tokens", g.Tokens(), h.f.Tokens()},
		{"Primary", g.Primary(), h.f.Primary()},
		{"LastNow", g.LastNow(), h.f.LastNow()},
		{"Counts", g.Counts(), h.f.Counts()},
		{"AppliedIndex", g.AppliedIndex(), h.index},
		{"Index(resources)", g.Index(TableResources), h.f.Index(TableResources)},
		{"Index(leases)", g.Index(TableLeases), h.f.Index(TableLeases)},
		{"Index(tokens)", g.Index(TableTokens), h.f.Index(TableTokens)},
		{"Index(primary)", g.Index(TablePrimary), h.f.Index(TablePrimary)},
	}
	for _, r := range reads {
		if !reflect.DeepEqual(r.got, r.want) {
			t.Errorf("%s() after restore = %+v, want %+v", r.name, r.got, r.want)
		}
	}
	gotNext, gotOK := g.NextExpiry()
	wantNext, wantOK := h.f.NextExpiry()
	if gotNext != wantNext || gotOK != wantOK {
		t.Errorf("NextExpiry() after restore = %d, %v, want %d, %v", gotNext, gotOK, wantNext, wantOK)
	}
	if m, ok := g.MachineForToken(sha256Sum("token-one")); !ok || m != "mbp" {
		t.Errorf("MachineForToken() after restore = %q, %v, want mbp, true", m, ok)
	}

	// The idempotency key survives: the same retried acquire, applied to
	// both replicas, returns the lease it created on each.
	retry := acquireCmd(t0+60, mbpCaller, "lease-retry")
	retry.IdempotencyKey = "idem-mbp"
	entry := h.entry(retry)
	want := h.f.Apply(entry)
	got := g.Apply(entry)
	if l, ok := want.(PortLease); !ok || l.LeaseID != "lease-mbp" {
		t.Fatalf("Apply(retry) on the original = %v, want the lease-mbp lease", want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Apply(retry) after restore = %+v, want %+v", got, want)
	}
	// And the replicas go on identically.
	for _, cmd := range []Command{Sweep{Header: Header{Now: t0 + ttl + 5000}}, acquireCmd(t0+ttl+6000, memberCaller, "lease-after")} {
		entry := h.entry(cmd)
		if a, b := h.f.Apply(entry), g.Apply(entry); jsonOf(a) != jsonOf(b) {
			t.Errorf("Apply(%T) = %s on the restored replica, want %s", cmd, jsonOf(b), jsonOf(a))
		}
	}
	if got, want := g.Hash(), h.f.Hash(); got != want {
		t.Errorf("Hash() after more entries = %s, want %s", got, want)
	}
}

// The snapshot is a copy: entries applied between Snapshot and Persist do
// not leak into it.
func TestFSM_SnapshotIsACopy(t *testing.T) {
	h := rich(t)
	wantHash, wantApplied := h.f.Hash(), h.f.AppliedIndex()
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 100}, Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"load":9}`)})
	h.mustApply(registerCmd(t0+100, memberCaller, "machine:late", "late"))
	h.mustApply(RevokeToken{Header: Header{Now: t0 + 100}, Machine: "mbp"})
	sink := &fakeSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() error = %v", err)
	}
	snap.Release()
	g := New()
	if err := restore(t, g, sink.Bytes()); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if got := g.Hash(); got != wantHash {
		t.Errorf("Hash() = %s, want the hash at Snapshot time %s", got, wantHash)
	}
	if got := g.AppliedIndex(); got != wantApplied {
		t.Errorf("AppliedIndex() = %d, want %d", got, wantApplied)
	}
}

func TestSnapshot_PersistCancelsOnError(t *testing.T) {
	h := rich(t)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	writeErr := errors.New("disk full")
	sink := &fakeSink{writeErr: writeErr}
	err = snap.Persist(sink)
	if !errors.Is(err, writeErr) {
		t.Errorf("Persist() = %v, want %v", err, writeErr)
	}
	if !sink.cancelled || sink.closed {
		t.Errorf("Persist() cancelled %v closed %v, want cancelled only", sink.cancelled, sink.closed)
	}
}

func TestFSM_RestoreRefuses(t *testing.T) {
	valid := string(persist(t, rich(t).f))
	tests := []struct {
		name string
		data string
	}{
		{name: "unknown version", data: strings.Replace(valid, `"version":1`, `"version":99`, 1)},
		{name: "version 0", data: strings.Replace(valid, `"version":1`, `"version":0`, 1)},
		{name: "no version", data: strings.Replace(valid, `"version":1,`, ``, 1)},
		{name: "truncated", data: valid[:len(valid)/2]},
		{name: "not JSON", data: "snapshot"},
		{name: "empty", data: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newBaseline(t)
			before := capture(h.f)
			applied := h.f.AppliedIndex()
			var chans []<-chan struct{}
			for table := range numTables {
				_, ch := h.f.Watch(table)
				chans = append(chans, ch)
			}
			if err := restore(t, h.f, []byte(tt.data)); err == nil {
				t.Fatalf("Restore() = nil, want an error")
			}
			assertUnchanged(t, h.f, before, 0)
			if got := h.f.AppliedIndex(); got != applied {
				t.Errorf("AppliedIndex() = %d, want %d", got, applied)
			}
			for table, ch := range chans {
				if isClosed(ch) {
					t.Errorf("Watch(%d) woken by a refused Restore", table)
				}
			}
		})
	}
}

func TestFSM_RestoreWakesWatches(t *testing.T) {
	data := persist(t, rich(t).f)
	h := newBaseline(t)
	var chans []<-chan struct{}
	for table := range numTables {
		_, ch := h.f.Watch(table)
		chans = append(chans, ch)
	}
	if err := restore(t, h.f, data); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	for table, ch := range chans {
		if !isClosed(ch) {
			t.Errorf("Watch(%d) not woken by Restore", table)
		}
		if _, next := h.f.Watch(Table(table)); isClosed(next) {
			t.Errorf("Watch(%d) after Restore returned a closed channel", table)
		}
	}
}

// Restore replaces the state: nothing of the old one survives.
func TestFSM_RestoreReplaces(t *testing.T) {
	empty := persist(t, New())
	h := rich(t)
	if err := restore(t, h.f, empty); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if got, want := h.f.Hash(), New().Hash(); got != want {
		t.Errorf("Hash() = %s, want the empty state's %s", got, want)
	}
	if m, ok := h.f.MachineForToken(sha256Sum("token-one")); ok {
		t.Errorf("MachineForToken() = %q, true after restoring an empty snapshot", m)
	}
	if got := h.f.AppliedIndex(); got != 0 {
		t.Errorf("AppliedIndex() = %d, want 0", got)
	}
}
