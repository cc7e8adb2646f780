package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"
)

// benchState returns a harness holding n live resources (machines with a load
// attribute, as members register them) plus a claim and a busy band, and the
// ids of the resources.
func benchState(b *testing.B, n int) (*harness, []string) {
	b.Helper()
	h := newHarness(b)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	ids := make([]string, n)
	for i := range n {
		machine := fmt.Sprintf("m%06d", i)
		ids[i] = "machine:" + machine
		cmd := registerCmd(t0, Caller{Owner: "b000000000000000"}, ids[i], machine)
		cmd.Attrs = attrs(`{"load":{"loadAvg":[0.52,0.61,0.7],"cpuCount":8,"freeMem":8123456789,"totalMem":17179869184,"observedAt":1700000000000}}`)
		h.mustApply(cmd)
	}
	for range 40 {
		h.mustApply(acquireCmd(t0, otherCaller, "lease-busy"))
	}
	return h, ids
}

var benchSizes = []int{0, 10_000, 100_000}

// applyEncoded applies an encoded entry at the next index.
func (h *harness) applyEncoded(b *testing.B, data []byte) any {
	h.index++
	return h.f.Apply(&raft.Log{Index: h.index, Term: h.term, Type: raft.LogCommand, Data: data})
}

func mustEncode(b *testing.B, cmd Command) []byte {
	b.Helper()
	d, err := Encode(cmd)
	if err != nil {
		b.Fatalf("Encode() error = %v", err)
	}
	return d
}

// BenchmarkFSM_Apply measures one applied log entry (decode and apply) of the
// commands members send most, at 0, 10k and 100k registered resources: the
// figures must not grow with the state's size.
func BenchmarkFSM_Apply(b *testing.B) {
	for _, n := range benchSizes {
		h, ids := benchState(b, n)
		now := t0 + 1
		b.Run(fmt.Sprintf("op=heartbeat/records=%d", n), func(b *testing.B) {
			if n == 0 {
				h.mustApply(registerCmd(t0, memberCaller, "machine:solo", "solo"))
				ids = []string{"machine:solo"}
			}
			entries := make([][]byte, len(ids))
			for i, id := range ids {
				entries[i] = mustEncode(b, HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: id})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err, ok := h.applyEncoded(b, entries[i%len(entries)]).(error); ok {
					b.Fatalf("Apply(heartbeat) = %v", err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("op=register/records=%d", n), func(b *testing.B) {
			cmd := registerCmd(now, memberCaller, "instance:bench/1", "bench")
			cmd.Kind, cmd.Endpoint = "instance", "http://10.0.0.1:31451"
			entry := mustEncode(b, cmd)
			b.ReportAllocs()
			for b.Loop() {
				if err, ok := h.applyEncoded(b, entry).(error); ok {
					b.Fatalf("Apply(register) = %v", err)
				}
			}
		})
		b.Run(fmt.Sprintf("op=acquire+renew+release/records=%d", n), func(b *testing.B) {
			acquire := mustEncode(b, acquireCmd(now, memberCaller, "lease-bench"))
			renew := mustEncode(b, RenewLease{Header: Header{Now: now}, Caller: memberCaller, Port: 31490, LeaseID: "lease-bench"})
			release := mustEncode(b, ReleaseLease{Header: Header{Now: now}, Caller: memberCaller, Port: 31490, LeaseID: "lease-bench"})
			b.ReportAllocs()
			for b.Loop() {
				for _, d := range [][]byte{acquire, renew, release} {
					if err, ok := h.applyEncoded(b, d).(error); ok {
						b.Fatalf("Apply() = %v", err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("op=sweep/records=%d", n), func(b *testing.B) {
			entry := mustEncode(b, Sweep{Header: Header{Now: now}})
			b.ReportAllocs()
			for b.Loop() {
				h.applyEncoded(b, entry)
			}
		})
		b.Run(fmt.Sprintf("op=next-expiry/records=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.f.NextExpiry()
			}
		})
	}
}

// BenchmarkFSM_Memory reports the live heap a state of n resources holds, per
// resource. The state is built once; run it with -benchtime 1x.
func BenchmarkFSM_Memory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h, _ := benchState(b, n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			for b.Loop() {
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-bytes/record")
			runtime.KeepAlive(h)
		})
	}
}

// discardSink is a raft.SnapshotSink that keeps nothing, so a benchmark of
// Persist counts only what Persist itself allocates.
type discardSink struct{ fakeSink }

func (s *discardSink) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkFSM_Snapshot measures Snapshot (the part under the lock), Persist
// and Restore at 100k resources. Persist streams the document: its
// alloc-bytes/record stays near zero. Restore reads it as a stream:
// alloc-bytes/record is the decoding garbage, heap-bytes/record what the
// restored state holds.
func BenchmarkFSM_Snapshot(b *testing.B) {
	const n = 100_000
	h, _ := benchState(b, n)
	b.Run("snapshot/records=100000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := h.f.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			s.Release()
		}
	})
	b.Run("persist/records=100000", func(b *testing.B) {
		b.ReportAllocs()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for b.Loop() {
			s, _ := h.f.Snapshot()
			if err := s.Persist(&discardSink{}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/n, "alloc-bytes/record")
	})
	doc := persist(b, h.f)
	b.Run("restore/records=100000", func(b *testing.B) {
		b.ReportAllocs()
		var before, after, held runtime.MemStats
		var g *FSM
		for b.Loop() {
			g = New()
			runtime.GC()
			runtime.ReadMemStats(&before)
			if err := g.Restore(io.NopCloser(bytes.NewReader(doc))); err != nil {
				b.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			runtime.GC()
			runtime.ReadMemStats(&held)
		}
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "alloc-bytes/record")
		b.ReportMetric(float64(held.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/record")
		runtime.KeepAlive(g)
	})
}
