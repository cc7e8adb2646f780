package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// BenchmarkBackup measures the parts of a backup and a restore that grow
// with the state, at 10k and 100k resources: writing the document (a save),
// reading and checking it and rebasing it (the leader's share of a restore),
// and restoring it (what every replica does when it installs a snapshot).
func BenchmarkBackup(b *testing.B) {
	for _, n := range benchSizes[1:] {
		h, _ := benchState(b, n)
		var doc bytes.Buffer
		if _, err := h.f.Export().WriteTo(&doc); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("op=export/records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(doc.Len()))
			for b.Loop() {
				if _, err := h.f.Export().WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("op=read+rebase/records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(doc.Len()))
			for b.Loop() {
				bk, err := ReadBackup(bytes.NewReader(doc.Bytes()))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bk.Rebase(RestoreParams{Holder: "node-b", Term: 9, Now: t0 + 1000, GraceMs: 1000, Index: bk.MaxIndex() + 1, Format: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("op=restore/records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(doc.Len()))
			for b.Loop() {
				if err := New().Restore(io.NopCloser(bytes.NewReader(doc.Bytes()))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
