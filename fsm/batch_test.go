package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// normalize zeroes what depends on the entry index, so a batch and the same
// commands in separate entries can be compared.
func normalize(v any) any {
	switch r := v.(type) {
	case Resource:
		r.Revision = 0
		return r
	case PortLease:
		r.Fence = 0
		return r
	case []Resource:
		out := make([]Resource, len(r))
		for i := range r {
			out[i] = normalize(r[i]).(Resource)
		}
		return out
	case []PortLease:
		out := make([]PortLease, len(r))
		for i := range r {
			out[i] = normalize(r[i]).(PortLease)
		}
		return out
	case error:
		return r.Error()
	}
	return v
}

// A batch gives every command the result it gets in an entry of its own, and
// leaves the same records (but for the index they carry).
func TestFSM_ApplyBatchEqualsSeparateEntries(t *testing.T) {
	now := t0 + 1000
	cmds := []Command{
		registerCmd(now, mbpCaller, "instance:mbp/2", "mbp"),
		HeartbeatResource{Header: Header{Now: now + 1}, Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"load":1}`)},
		HeartbeatResource{Header: Header{Now: now + 2}, Caller: memberCaller, ID: "machine:nobody"}, // 404
		registerCmd(now+3, mbpCaller, "machine:studio", "studio"),                                   // 403
		RenewLease{Header: Header{Now: now + 4}, Caller: memberCaller, Port: 31450, LeaseID: "lease-base"},
		acquireCmd(now+5, mbpCaller, "lease-batched"),
		ReleaseLease{Header: Header{Now: now + 6}, Caller: memberCaller, Port: 31450, LeaseID: "wrong"}, // 409
		DeleteResource{Header: Header{Now: now + 7}, Caller: mbpCaller, ID: "instance:mbp/2"},
		IssueToken{Header: Header{Now: now + 8}, Machine: "studio", SHA256: tokenSumTwo},
		RevokeToken{Header: Header{Now: now + 9}, Machine: "base"},
	}
	separate := newBaseline(t)
	var want []any
	for _, c := range cmds {
		want = append(want, normalize(separate.apply(c)))
	}

	batched := newBaseline(t)
	res := batched.apply(mustBatch(now, cmds...))
	br, ok := res.(BatchResult)
	if !ok {
		t.Fatalf("Apply(batch) = %T %v, want a BatchResult", res, res)
	}
	if len(br.Results) != len(cmds) {
		t.Fatalf("Apply(batch) gave %d results, want %d", len(br.Results), len(cmds))
	}
	for i := range cmds {
		if got := normalize(br.Results[i]); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("result %d (%T) = %#v, want %#v", i, cmds[i], got, want[i])
		}
	}
	for _, check := range []struct {
		name      string
		got, want any
	}{
		{"Resources", normalize(batched.f.Resources("", "")), normalize(separate.f.Resources("", ""))},
		{"Leases", normalize(batched.f.Leases()), normalize(separate.f.Leases())},
		{"Tokens", batched.f.Tokens(), separate.f.Tokens()},
		{"LastNow", batched.f.LastNow(), separate.f.LastNow()},
		{"Primary", batched.f.Primary(), separate.f.Primary()},
	} {
		if !reflect.DeepEqual(check.got, check.want) {
			t.Errorf("%s after the batch = %#v, want %#v", check.name, check.got, check.want)
		}
	}
	// Every table the batch changed carries the batch's index.
	for _, table := range []Table{TableResources, TableLeases, TableTokens} {
		if got := batched.f.Index(table); got != batched.index {
			t.Errorf("Index(%d) = %d, want the batch's index %d", table, got, batched.index)
		}
	}
}

// Within a batch a refused command changes nothing and leaves the others
// alone; what a batch may not hold is refused item by item.
func TestFSM_ApplyBatchRefusesItems(t *testing.T) {
	h := newBaseline(t)
	now := t0 + 1000
	b := mustBatch(now, acquireCmd(now, memberCaller, "lease-one"), registerCmd(now, memberCaller, "machine:kept", "kept"))
	second, err := marshalJSON(acquireCmd(now, memberCaller, "lease-two"))
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := marshalJSON(ClaimPrimary{Header: Header{Now: now}, Holder: "node-z", GraceMs: 0})
	sweep, _ := marshalJSON(Sweep{Header: Header{Now: now + ttl*10}})
	inner, _ := marshalJSON(mustBatch(now, registerCmd(now, memberCaller, "machine:inner", "inner")))
	format, _ := marshalJSON(SetFormat{Header: Header{Now: now}, Level: 2})
	b.Commands = append(b.Commands,
		BatchItem{Type: AcquireLeaseType, Body: second},
		BatchItem{Type: ClaimPrimaryType, Body: claim},
		BatchItem{Type: SweepType, Body: sweep},
		BatchItem{Type: BatchType, Body: inner},
		BatchItem{Type: SetFormatType, Body: format},
		BatchItem{Type: 0x7e, Body: []byte(`{}`)},
		BatchItem{Type: RegisterResourceType, Body: []byte(`[1,2]`)},
	)
	res := h.mustApply(b).(BatchResult)
	if _, ok := res.Results[0].(PortLease); !ok {
		t.Errorf("result 0 = %v, want the first acquire granted", res.Results[0])
	}
	if _, ok := res.Results[1].(Resource); !ok {
		t.Errorf("result 1 = %v, want the register applied", res.Results[1])
	}
	for i := 2; i < len(res.Results); i++ {
		if err, ok := res.Results[i].(error); !ok || !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("result %d (type %d) = %v, want an error wrapping %v", i, b.Commands[i].Type, res.Results[i], ErrInvalidCommand)
		}
	}
	if p := h.f.Primary(); p.Holder != "node-a" {
		t.Errorf("Primary() = %+v: a claim inside a batch was applied", p)
	}
	if _, ok := h.f.Resource("machine:inner"); ok {
		t.Errorf("a batch inside a batch was applied")
	}
	if h.f.Format() != 1 {
		t.Errorf("Format() = %d: a format change inside a batch was applied", h.f.Format())
	}
	if n := h.f.Counts().Leases; n != 2 {
		t.Errorf("Counts().Leases = %d, want 2 (the baseline's and the first acquire's)", n)
	}
}

// NewBatch refuses what a batch may not hold, so a leader never proposes it.
func TestNewBatch_Refuses(t *testing.T) {
	now := t0
	tests := []struct {
		name string
		cmds []Command
	}{
		{"two acquires", []Command{acquireCmd(now, memberCaller, "a"), acquireCmd(now, memberCaller, "b")}},
		{"a claim", []Command{ClaimPrimary{Header: Header{Now: now}, Holder: "node-a"}}},
		{"a sweep", []Command{Sweep{Header: Header{Now: now}}}},
		{"a batch", []Command{mustBatch(now)}},
		{"a format change", []Command{SetFormat{Header: Header{Now: now}, Level: 2}}},
	}
	for _, tt := range tests {
		if _, err := NewBatch(now, tt.cmds); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("NewBatch(%s) error = %v, want %v", tt.name, err, ErrInvalidCommand)
		}
	}
}

// Every command of a batch runs at least at the batch's time; the cluster
// time ends at the latest of them.
func TestFSM_ApplyBatchTime(t *testing.T) {
	h := newBaseline(t)
	early := registerCmd(t0+5, memberCaller, "machine:early", "early")
	late := registerCmd(t0+500, memberCaller, "machine:late", "late")
	h.mustApply(mustBatch(t0+100, early, late))
	if r, _ := h.f.Resource("machine:early"); r.RenewedAt != t0+100 {
		t.Errorf("early command renewedAt = %d, want the batch's time %d", r.RenewedAt, t0+100)
	}
	if r, _ := h.f.Resource("machine:late"); r.RenewedAt != t0+500 {
		t.Errorf("late command renewedAt = %d, want its own time %d", r.RenewedAt, t0+500)
	}
	if got := h.f.LastNow(); got != t0+500 {
		t.Errorf("LastNow() = %d, want %d", got, t0+500)
	}
}

// SetFormat raises the level once, to a level this build knows, and the
// snapshot document follows the level.
func TestFSM_SetFormat(t *testing.T) {
	h := newBaseline(t)
	if !strings.HasPrefix(string(persist(t, h.f)), `{"version":1,`) {
		t.Fatalf("a new state does not write snapshot version 1")
	}
	for _, level := range []int{1, 0, MaxFormat + 1} {
		if err, _ := h.apply(SetFormat{Header: Header{Now: t0}, Level: level}).(error); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("Apply(SetFormat %d) at format 1 = %v, want %v", level, err, ErrInvalidCommand)
		}
	}
	h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 2})
	if h.f.Format() != 2 {
		t.Fatalf("Format() = %d, want 2", h.f.Format())
	}
	if err, _ := h.apply(SetFormat{Header: Header{Now: t0}, Level: 2}).(error); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("Apply(SetFormat 2) at format 2 = %v, want %v", err, ErrInvalidCommand)
	}
	data := persist(t, h.f)
	if !strings.HasPrefix(string(data), `{"version":2,`) {
		t.Errorf("snapshot at format 2 = %.40s…, want version 2", data)
	}
	g := New()
	if err := restore(t, g, data); err != nil {
		t.Fatalf("Restore(version 2) error = %v", err)
	}
	if g.Format() != 2 || g.Hash() != h.f.Hash() {
		t.Errorf("restored: Format() = %d, Hash() = %s; want 2, %s", g.Format(), g.Hash(), h.f.Hash())
	}
}
