package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// syntheticSnapshot returns a snapshot file of n live machine resources as
// members register them (a load attribute), made by applying the commands
// to a state machine.
func syntheticSnapshot(b *testing.B, n int) []byte {
	b.Helper()
	f := fsm.New()
	now := time.Now().UnixMilli()
	index := uint64(0)
	apply := func(cmd fsm.Command) {
		data, err := fsm.Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		index++
		if err, ok := f.Apply(&raft.Log{Index: index, Term: 2, Type: raft.LogCommand, Data: data}).(error); ok {
			b.Fatalf("Apply(%T) = %v", cmd, err)
		}
	}
	load := map[string]json.RawMessage{"load": json.RawMessage(`{"loadAvg":[0.52,0.61,0.7],"cpuCount":8,"freeMem":8123456789,"totalMem":17179869184,"observedAt":1700000000000}`)}
	apply(fsm.ClaimPrimary{Header: fsm.Header{Now: now}, Holder: "node-a", GraceMs: 1000})
	apply(fsm.SetFormat{Header: fsm.Header{Now: now}, Level: fsm.MaxFormat})
	for i := range n {
		machine := fmt.Sprintf("m%06d", i)
		apply(fsm.RegisterResource{Header: fsm.Header{Now: now}, Caller: fsm.Caller{Owner: "b000000000000000"},
			ID: "machine:" + machine, Kind: "machine", Name: machine, Machine: machine, TTLMs: 600_000, ObservedAt: now,
			Attrs: load})
	}
	e := f.Export()
	var doc bytes.Buffer
	if _, err := e.WriteTo(&doc); err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(doc.Bytes())
	c := e.Counts()
	h := wire.SnapshotHeader{Kind: wire.SnapshotKind, Container: wire.SnapshotContainer, Index: e.Applied(), Term: 2,
		Generation: e.Primary().Generation, Holder: e.Primary().Holder, FormatLevel: e.Format(), LastNow: e.LastNow(),
		Counts: wire.SnapshotCounts{Resources: c.Resources, Leases: c.Leases, Tokens: c.Tokens, Candidates: c.Candidates},
		Size:   int64(doc.Len()), SHA256: hex.EncodeToString(sum[:])}
	return append(h.Line(), doc.Bytes()...)
}

// BenchmarkServer_Snapshot measures a restore (PUT /v1/snapshot: check,
// rebase, raft.Restore, install on a quorum) and a save (GET /v1/snapshot)
// of 10,000 and 100,000 resources on a three-node loopback cluster with
// boltdb stores.
func BenchmarkServer_Snapshot(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		file := syntheticSnapshot(b, n)
		c := apitest.Start(b, clusterOptions())
		leader := c.Nodes[c.Leader()]
		b.Run(fmt.Sprintf("op=restore/resources=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(file)))
			for b.Loop() {
				r := testutil.Send(b, putSnapshot(leader.URL, c.Tokens.Admin, file))
				testutil.WantStatus(b, "PUT /v1/snapshot", r, http.StatusOK)
			}
		})
		b.Run(fmt.Sprintf("op=save/resources=%d", n), func(b *testing.B) {
			var size int
			for b.Loop() {
				r := testutil.Send(b, testutil.Call{Method: http.MethodGet, URL: leader.URL + "/v1/snapshot", Auth: testutil.Bearer(c.Tokens.Admin)})
				testutil.WantStatus(b, "GET /v1/snapshot", r, http.StatusOK)
				size = len(r.Body)
			}
			b.SetBytes(int64(size))
		})
		c.Stop()
	}
}
