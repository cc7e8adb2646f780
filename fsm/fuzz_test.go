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
// successful Apply the state survives a snapshot round trip.
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

		h := newHarness(t)
		h.baseline()
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
		if _, refused := res.(error); refused {
			now := cmd.header().Now
			if _, claim := cmd.(ClaimPrimary); claim {
				now = before.lastNow // a refused claim leaves the time alone
			}
			assertUnchanged(t, h.f, before, now)
		}
		// Whatever happened, a second replica and a restored one agree.
		other := newHarness(t)
		other.baseline()
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
	})
}
