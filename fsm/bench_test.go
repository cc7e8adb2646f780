package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkFSM_ApplyAcquireRenew measures one grant, one renewal and one
// release per iteration, each a decoded and applied log entry, against a
// state holding a busy band and a few hundred resources.
func BenchmarkFSM_ApplyAcquireRenew(b *testing.B) {
	h := newHarness(b)
	h.baseline()
	for i := range 300 {
		h.mustApply(registerCmd(t0, memberCaller, "instance:bench/"+string(rune('a'+i%26))+string(rune('a'+i/26)), "mbp"))
	}
	for range 40 {
		h.mustApply(acquireCmd(t0, otherCaller, "lease-busy"))
	}
	data := func(cmd Command) []byte {
		d, err := Encode(cmd)
		if err != nil {
			b.Fatalf("Encode() error = %v", err)
		}
		return d
	}
	acquire := data(acquireCmd(t0, memberCaller, "lease-bench"))
	renew := data(RenewLease{Header: Header{Now: t0 + 1}, Caller: memberCaller, Port: 31491, LeaseID: "lease-bench"})
	release := data(ReleaseLease{Header: Header{Now: t0 + 2}, Caller: memberCaller, Port: 31491, LeaseID: "lease-bench"})
	index := h.index
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range [][]byte{acquire, renew, release} {
			index++
			if err, ok := h.f.Apply(&raft.Log{Index: index, Term: baseTerm, Type: raft.LogCommand, Data: d}).(error); ok {
				b.Fatalf("Apply() = %v, want success", err)
			}
		}
	}
}
