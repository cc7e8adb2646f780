package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// FuzzDecode checks that Decode never panics, that a decoded command's
// canonical encoding is stable, and that Apply behaves as the log format
// promises: known types never panic (a malformed body is an ErrInvalidCommand
// no-op), skippable types are no-ops, anything else panics. After a
// successful Apply the state survives a snapshot round trip. Each entry is
// applied at both format levels: to the baseline at format 1 and to the
// baseline raised to format 2 (quotas, machine ids, token hashes in
// commands, the candidate directory and limits).
func FuzzDecode(f *testing.F) {
	for _, cmd := range sampleCommands() {
		data, err := Encode(cmd)
		if err != nil {
			f.Fatalf("Encode(%T) error = %v", cmd, err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"", "\x00", "\x00{}", "\x0b{}", "\x0b{\"commands\":[{\"type\":4,\"body\":{}}]}", "\x0c{\"level\":2}", "\x7e{}", "\x7f", "\x80", "\x8a{}", "\xff\xff",
		"\x01", "\x01{", "\x01[]", "\x01null", "\x04{\"now\":1}}", "\x04{\"now\":1e400}",
		"\x04{\"now\":9223372036854775807,\"ttlMs\":9223372036854775807,\"bandStart\":1,\"bandEnd\":65535,\"machine\":\"m\",\"purpose\":\"p\",\"leaseId\":\"l\"}",
		"\x09{\"now\":-9223372036854775808,\"holder\":\"node-a\",\"graceMs\":9223372036854775807}",
		"\x01{\"id\":\"x\",\"kind\":\"machine\",\"name\":\"n\",\"machine\":\"m\",\"ttlMs\":1,\"attrs\":{\"a\":[1, 2, {\"b\": \"<\"}]}}",
	} {
		f.Add([]byte(seed))
	}
	// Format 2: commands under the baseline's machine token ("base", whose
	// token hash is tokenSumThree), under a stale hash, and the directory
	// and limits commands at their edges.
	base := tokenCaller(memberCaller.Owner, "base", tokenSumThree)
	stale := tokenCaller(memberCaller.Owner, "base", tokenSumOne)
	inst := registerCmd(t0+1, base, "instance:base/1", "base")
	inst.Kind = "instance"
	acq := acquireCmd(t0+1, base, "lease-2")
	acq.IdempotencyKey = "idem-base"
	for _, cmd := range []Command{
		registerCmd(t0+1, base, "machine:base", "base"),
		registerCmd(t0+1, base, "machine:other", "base"),
		registerCmd(t0+1, stale, "machine:base", "base"),
		inst,
		acq,
		HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: base, ID: "machine:base", Attrs: attrs(`{"load":1}`)},
		DeleteResource{Header: Header{Now: t0 + 1}, Caller: stale, ID: "machine:base"},
		RenewLease{Header: Header{Now: t0 + 1}, Caller: base, Port: bandLow, LeaseID: "lease-base"},
		ReleaseLease{Header: Header{Now: t0 + 1}, Caller: adminCaller, Port: bandLow, LeaseID: "lease-base"},
		SetLimits{Header: Header{Now: t0 + 1}, Limits: Limits{ResourcesPerMachine: 1, LeasesPerMachine: 1, Resources: 1, IdempotencyKeys: 1}},
		SetLimits{Header: Header{Now: t0 + 1}, Limits: Limits{Resources: -1}},
		PutCandidate{Header: Header{Now: t0 + 1}, Candidate: Candidate{Machine: "node-d", URL: "http://[::1]:31413", Raft: "[::1]:31412", Voter: true}},
		PutCandidate{Header: Header{Now: t0 + 1}, Candidate: Candidate{Machine: "node-d", URL: "HTTP://Host:80/", Raft: "host:0"}},
		RemoveCandidate{Header: Header{Now: t0 + 1}, Machine: "node-a"},
		SetFormat{Header: Header{Now: t0 + 1}, Level: MaxFormat + 1},
		mustBatch(t0+1, registerCmd(t0+1, base, "machine:base", "base"), acq, RevokeToken{Header: Header{Now: t0 + 1}, Machine: "base"},
			HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: base, ID: "machine:base"}),
	} {
		data, err := Encode(cmd)
		if err != nil {
			f.Fatalf("Encode(%T) error = %v", cmd, err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, ok, err := Decode(data)
		switch {
		case !ok && (cmd != nil || err != nil):
			t.Fatalf("Decode() = %v, false, %v, want nil, false, nil", cmd, err)
		case ok && err != nil && (cmd != nil || !errors.Is(err, ErrInvalidCommand)):
			t.Fatalf("Decode() = %v, true, %v, want nil and an error wrapping %v", cmd, err, ErrInvalidCommand)
		case ok && err == nil:
			if CommandType(data[0]) != cmd.Type() {
				t.Fatalf("Decode() = %T for type byte %d", cmd, data[0])
			}
			once, err := Encode(cmd)
			if err != nil {
				t.Fatalf("Encode(Decode()) error = %v", err)
			}
			again, ok, err := Decode(once)
			if !ok || err != nil {
				t.Fatalf("Decode(Encode(Decode())) = _, %v, %v", ok, err)
			}
			twice, err := Encode(again)
			if err != nil || !bytes.Equal(once, twice) {
				t.Fatalf("Encode is not stable: %q then %q (%v)", once, twice, err)
			}
		}
		for format := 1; format <= MaxFormat; format++ {
			checkApply(t, data, cmd, ok, err, format)
		}
	})
}

// checkApply applies data, which Decode returned cmd, ok and err for, to the
// baseline at format level format, and checks the outcome the log format
// promises (see FuzzDecode).
func checkApply(t *testing.T, data []byte, cmd Command, ok bool, err error, format int) {
	t.Helper()
	h := atFormat(t, format)
	before := capture(h.f)
	entry := h.rawEntry(data)
	var res interface{}
	panicked := func() (p any) {
		defer func() { p = recover() }()
		res = h.f.Apply(entry)
		return nil
	}()
	skippable := len(data) > 0 && CommandType(data[0])&SkipBit != 0
	switch {
	case !ok && !skippable:
		if panicked == nil {
			t.Fatalf("Apply() = %v for unknown type, want a panic", res)
		}
		want := fmt.Sprintf("fsm: unknown command type %d at index %d", -1, entry.Index)
		if len(data) > 0 {
			want = fmt.Sprintf("fsm: unknown command type %d at index %d", data[0], entry.Index)
		}
		if msg, _ := panicked.(string); len(msg) < len(want) || msg[:len(want)] != want {
			t.Fatalf("Apply() panicked with %v, want it to start %q", panicked, want)
		}
		return
	case panicked != nil:
		t.Fatalf("Apply() panicked with %v on %q", panicked, data)
	case !ok:
		if res != nil {
			t.Fatalf("Apply() = %v on a skippable entry, want nil", res)
		}
		assertUnchanged(t, h.f, before, 0)
		return
	case err != nil:
		if got, _ := res.(error); !errors.Is(got, ErrInvalidCommand) {
			t.Fatalf("Apply() = %v on a malformed body, want %v", res, ErrInvalidCommand)
		}
		assertUnchanged(t, h.f, before, 0)
		return
	}
	checkIndexes(t, h.f, fmt.Sprintf("after Apply at format %d", format))
	if _, refused := res.(error); refused {
		now := cmd.header().Now
		if _, claim := cmd.(ClaimPrimary); claim {
			now = before.lastNow // a refused claim leaves the time alone
		}
		assertUnchanged(t, h.f, before, now)
	}
	// Whatever happened, a second replica and a restored one agree.
	other := atFormat(t, format)
	other.f.Apply(entry)
	if a, b := h.f.Hash(), other.f.Hash(); a != b {
		t.Fatalf("Hash() = %s and %s on two replicas", a, b)
	}
	restored := New()
	if err := restore(t, restored, persist(t, h.f)); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if a, b := h.f.Hash(), restored.Hash(); a != b {
		t.Fatalf("Hash() = %s, %s after a snapshot round trip", a, b)
	}
}
