package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// mustBatch builds a Batch of cmds or panics.
func mustBatch(now int64, cmds ...Command) Batch {
	b, err := NewBatch(now, cmds)
	if err != nil {
		panic(err)
	}
	return b
}

// sampleCommands returns one valid command of every type.
func sampleCommands() []Command {
	reg := registerCmd(t0, memberCaller, "instance:mbp/1", "mbp")
	reg.Kind, reg.Endpoint = "instance", "http://127.0.0.1:31451"
	reg.Attrs = attrs(`{"load":0.5,"duties":["build","test"],"note":"<a&b> ü"}`)
	acq := acquireCmd(t0, mbpCaller, "lease-1")
	acq.Excluded, acq.IdempotencyKey = []int{31450, 31452}, "idem-1"
	return []Command{
		reg,
		HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: mbpCaller, ID: "instance:mbp/1", Attrs: attrs(`{"load":0.7}`)},
		DeleteResource{Header: Header{Now: t0 + 2}, Caller: adminCaller, ID: "instance:mbp/1"},
		acq,
		RenewLease{Header: Header{Now: t0 + 3}, Caller: mbpCaller, Port: 31451, LeaseID: "lease-1"},
		ReleaseLease{Header: Header{Now: t0 + 4}, Caller: adminCaller, Port: 31451, LeaseID: "lease-1"},
		IssueToken{Header: Header{Now: t0 + 5}, Machine: "mbp", SHA256: tokenSumOne},
		RevokeToken{Header: Header{Now: t0 + 6}, Machine: "mbp"},
		ClaimPrimary{Header: Header{Now: t0 + 7}, Holder: "node-a", GraceMs: 1000},
		Sweep{Header: Header{Now: t0 + 8}},
		mustBatch(t0+9, reg, HeartbeatResource{Header: Header{Now: t0 + 9}, Caller: mbpCaller, ID: "instance:mbp/1"}),
		SetFormat{Header: Header{Now: t0 + 10}, Level: 2},
		PutCandidate{Header: Header{Now: t0 + 11}, Candidate: Candidate{Machine: "node-d", URL: "https://10.0.0.4:31413", Raft: "10.0.0.4:31412"}},
		RemoveCandidate{Header: Header{Now: t0 + 12}, Machine: "node-d"},
		SetLimits{Header: Header{Now: t0 + 13}, Limits: Limits{ResourcesPerMachine: 8, LeasesPerMachine: 2}},
	}
}

func TestDecode_RoundTrip(t *testing.T) {
	for _, cmd := range sampleCommands() {
		t.Run(fmt.Sprintf("%T", cmd), func(t *testing.T) {
			data, err := Encode(cmd)
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			if CommandType(data[0]) != cmd.Type() {
				t.Errorf("Encode()[0] = %d, want %d", data[0], cmd.Type())
			}
			got, ok, err := Decode(data)
			if err != nil || !ok {
				t.Fatalf("Decode() = _, %v, %v, want ok", ok, err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Errorf("Decode() = %#v, want %#v", got, cmd)
			}
			again, err := Encode(got)
			if err != nil || !bytes.Equal(again, data) {
				t.Errorf("Encode(Decode()) = %s, %v, want %s", again, err, data)
			}
		})
	}
}

// Encode writes attrs as the client wrote them: no HTML escaping, so the
// 16 KiB limit measures the same bytes in the API and in Apply.
func TestEncode_NoHTMLEscaping(t *testing.T) {
	data, err := Encode(sampleCommands()[0])
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	if !bytes.Contains(data, []byte(`"note":"<a&b> ü"`)) || bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("Encode() = %s, want the note unescaped and no trailing newline", data[1:])
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		want    Command
		wantOK  bool
		wantErr error
	}{
		{name: "empty", data: nil},
		{name: "reserved type 0", data: []byte{0, '{', '}'}},
		{name: "unknown type", data: []byte("\x7e{}")},
		{name: "skip bit", data: []byte("\x80{}")},
		{name: "known type with skip bit", data: []byte("\x8a{}")},
		{name: "unknown fields ignored", data: []byte("\x0a{\"now\":5,\"later\":true}"), want: Sweep{Header: Header{Now: 5}}, wantOK: true},
		{name: "white space after the body", data: []byte("\x0a{\"now\":5} \n"), want: Sweep{Header: Header{Now: 5}}, wantOK: true},
		{name: "no body", data: []byte{byte(SweepType)}, wantOK: true, wantErr: ErrInvalidCommand},
		{name: "trailing brace", data: []byte("\x0a{\"now\":5}}"), wantOK: true, wantErr: ErrInvalidCommand},
		{name: "trailing bracket", data: []byte("\x0a{\"now\":5}]"), wantOK: true, wantErr: ErrInvalidCommand},
		{name: "second value", data: []byte("\x0a{\"now\":5}{}"), wantOK: true, wantErr: ErrInvalidCommand},
		{name: "wrong field type", data: []byte("\x0a{\"now\":\"soon\"}"), wantOK: true, wantErr: ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := Decode(tt.data)
			if ok != tt.wantOK || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Decode() = %v, %v, %v, want ok %v, error %v", got, ok, err, tt.wantOK, tt.wantErr)
			}
			if tt.wantErr == nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// An unknown type without the skip bit panics: version skew must crash the
// replica rather than let it diverge. An empty entry panics the same way (it
// is never produced by Encode; type -1 in the message).
func TestFSM_ApplyUnknownTypePanics(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{name: "reserved type 0", data: []byte("\x00{}"), want: "fsm: unknown command type 0 at index 5: this binary is older than the cluster's log"},
		{name: "a later type", data: []byte("\x7e{}"), want: "fsm: unknown command type 126 at index 5: this binary is older than the cluster's log"},
		{name: "highest type without skip bit", data: []byte{0x7f}, want: "fsm: unknown command type 127 at index 5: this binary is older than the cluster's log"},
		{name: "empty entry", data: nil, want: "fsm: unknown command type -1 at index 5: this binary is older than the cluster's log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newBaseline(t)
			got := func() (msg any) {
				defer func() { msg = recover() }()
				h.raw(tt.data)
				return nil
			}()
			if got != tt.want {
				t.Errorf("Apply() panicked with %v, want %q", got, tt.want)
			}
			// The lock was released on the way out.
			if n := h.f.Counts().Resources; n != 1 {
				t.Errorf("Counts().Resources = %d after the panic, want 1", n)
			}
		})
	}
}

func TestFSM_ApplySkipBit(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{name: "bare skip bit", data: []byte{0x80}},
		{name: "future type with a body", data: []byte("\x8b{\"now\":99999999999999}")},
		{name: "known type with skip bit", data: []byte("\x8a{\"now\":99999999999999}")},
		{name: "garbage body", data: []byte("\xff\x00\x01garbage")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newBaseline(t)
			before := capture(h.f)
			if res := h.raw(tt.data); res != nil {
				t.Errorf("Apply() = %v, want nil", res)
			}
			assertUnchanged(t, h.f, before, 0)
			if got := h.f.AppliedIndex(); got != h.index {
				t.Errorf("AppliedIndex() = %d, want %d", got, h.index)
			}
		})
	}
}

// A known type whose body does not decode is a no-op returning an error
// wrapping ErrInvalidCommand; it does not even move the time.
func TestFSM_ApplyMalformedBody(t *testing.T) {
	bodies := []string{"", "{", "[]", `"x"`, `{"now":"soon"}`, `{"now":99999999999999}}`, `{"now":99999999999999}{}`, `{"now":1e400}`}
	for typ := range commandTable {
		for _, body := range bodies {
			t.Run(fmt.Sprintf("type %d body %q", typ, body), func(t *testing.T) {
				h := newBaseline(t)
				before := capture(h.f)
				_, ch := h.f.Watch(TableResources)
				res := h.raw(append([]byte{byte(typ)}, body...))
				if err, ok := res.(error); !ok || !errors.Is(err, ErrInvalidCommand) {
					t.Fatalf("Apply() = %v, want an error wrapping %v", res, ErrInvalidCommand)
				}
				assertUnchanged(t, h.f, before, 0)
				if isClosed(ch) {
					t.Errorf("Watch(TableResources) woken by a malformed entry")
				}
				if got := h.f.AppliedIndex(); got != h.index {
					t.Errorf("AppliedIndex() = %d, want %d", got, h.index)
				}
			})
		}
	}
}

// Apply ignores the entry's raft type: raft only hands it LogCommand entries.
func TestFSM_ApplyEntryIndex(t *testing.T) {
	h := newHarness(t)
	data, err := Encode(Sweep{Header: Header{Now: t0}})
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	for _, index := range []uint64{7, 9, 8} {
		h.f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
	}
	if got := h.f.AppliedIndex(); got != 9 {
		t.Errorf("AppliedIndex() = %d, want 9 (the highest)", got)
	}
}
