package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// maxFuzzBatch bounds the items FuzzFSM_Batch puts in one batch.
const maxFuzzBatch = 16

// fuzzBatchItems splits data into batch items: one item per line, its first
// byte the type and the rest the body. A body that is not JSON is carried as
// a JSON string (a Batch entry holds raw JSON), which no command decodes.
func fuzzBatchItems(data []byte) []BatchItem {
	var items []BatchItem
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 || len(items) == maxFuzzBatch {
			continue
		}
		body := json.RawMessage(line[1:])
		if !json.Valid(body) {
			body, _ = json.Marshal(string(line[1:]))
		}
		items = append(items, BatchItem{Type: CommandType(line[0]), Body: body})
	}
	return items
}

// batchLine is a seed line of FuzzFSM_Batch: cmd as a batch item.
func batchLine(cmd Command) string {
	data, err := Encode(cmd)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// FuzzFSM_Batch applies a batch of fuzzed items (group commit) to the
// baseline at format 1 or 2 and checks it against its definition: a batch is
// its items applied in order as entries of their own, at the batch's term and
// index and at least at the batch's time. A second replica applies exactly
// that — an entry that only moves the cluster time to the batch's, then each
// item the batch may hold as its own entry — and must reach the same state
// and the same result per item. Items a batch may not hold (unknown types, a
// claim, sweep, format change, directory or limits command, a nested batch,
// a second acquire) and items whose body does not decode must be refused
// with ErrInvalidCommand and change nothing. Nothing may panic.
func FuzzFSM_Batch(f *testing.F) {
	base := tokenCaller(memberCaller.Owner, "base", tokenSumThree)
	acq := acquireCmd(t0+2, base, "lease-2")
	acq.Machine = "base"
	acq.IdempotencyKey = "idem-base"
	seeds := [][]Command{
		{registerCmd(t0+1, memberCaller, "machine:mbp", "mbp"), HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"}},
		{registerCmd(t0+1, base, "machine:base", "base"), acq, RevokeToken{Header: Header{Now: t0 + 3}, Machine: "base"},
			HeartbeatResource{Header: Header{Now: t0 + 4}, Caller: base, ID: "machine:base", Attrs: attrs(`{"load":2}`)}},
		{acquireCmd(t0, memberCaller, "lease-1"), acquireCmd(t0, memberCaller, "lease-2")},
		{RenewLease{Header: Header{Now: t0 + 5}, Caller: memberCaller, Port: bandLow, LeaseID: "lease-base"},
			ReleaseLease{Header: Header{Now: t0 - 5}, Caller: memberCaller, Port: bandLow, LeaseID: "lease-base"},
			RenewLease{Header: Header{Now: t0 + 6}, Caller: memberCaller, Port: bandLow, LeaseID: "lease-base"}},
		{IssueToken{Header: Header{Now: t0 + 1}, Machine: "mbp", SHA256: tokenSumThree}, IssueToken{Header: Header{Now: t0 + 1}, Machine: "mbp", SHA256: tokenSumOne},
			DeleteResource{Header: Header{Now: t0 + 1}, Caller: adminCaller, ID: "machine:base"}},
		{Sweep{Header: Header{Now: t0 + ttl}}, ClaimPrimary{Header: Header{Now: t0}, Holder: "node-b"}, SetFormat{Header: Header{Now: t0}, Level: 2},
			SetLimits{Header: Header{Now: t0}, Limits: Limits{Resources: 1}}, PutCandidate{Header: Header{Now: t0}, Candidate: Candidate{Machine: "node-d"}},
			RemoveCandidate{Header: Header{Now: t0}, Machine: "node-d"}, mustBatch(t0)},
	}
	for i, cmds := range seeds {
		var lines []string
		for _, c := range cmds {
			lines = append(lines, batchLine(c))
		}
		f.Add([]byte(strings.Join(lines, "\n")), t0+int64(i), i%2 == 0)
	}
	f.Add([]byte("\x01{}\n\x02null\n\x03\n\x04[]\n\x7f{}\n\xff{}\n\x01{\"now\":1}}"), int64(0), true)
	f.Add([]byte("\x02{\"now\":-9223372036854775808,\"caller\":{\"owner\":\"b000000000000000\"},\"id\":\"machine:base\"}"), int64(9223372036854775807), false)

	f.Fuzz(func(t *testing.T, data []byte, now int64, format2 bool) {
		format := 1
		if format2 {
			format = 2
		}
		items := fuzzBatchItems(data)
		batch := Batch{Header: Header{Now: now}, Commands: items}
		encoded, err := Encode(batch)
		if err != nil {
			t.Fatalf("Encode(Batch) error = %v", err)
		}

		// Replica a applies the batch as one entry.
		a := atFormat(t, format)
		before := capture(a.f)
		index := a.index + 1
		entry := &raft.Log{Index: index, Term: a.term, Type: raft.LogCommand, Data: encoded}
		res, ok := a.f.Apply(entry).(BatchResult)
		if !ok {
			t.Fatalf("Apply(Batch) = %T, want a BatchResult", res)
		}
		if len(res.Results) != len(items) {
			t.Fatalf("Apply(Batch) gave %d results for %d items", len(res.Results), len(items))
		}
		checkIndexes(t, a.f, "after the batch")

		// Replica b applies the items one by one at the same term and index.
		b := atFormat(t, format)
		apply := func(data []byte) any {
			return b.f.Apply(&raft.Log{Index: index, Term: b.term, Type: raft.LogCommand, Data: data})
		}
		// A refused delete (an empty id) only moves the time to the batch's.
		if err, _ := apply(mustEncodeT(t, DeleteResource{Header: Header{Now: now}})).(error); !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("the time-moving entry was not refused: %v", err)
		}
		acquires := 0
		for i, item := range items {
			got := res.Results[i]
			refuse := batchable(commandTable, item.Type)
			if refuse == nil {
				_, refuse = commandTable[item.Type].decode(item.Body)
			}
			if refuse == nil && item.Type == AcquireLeaseType {
				if acquires++; acquires > 1 {
					refuse = ErrInvalidCommand
				}
			}
			if refuse != nil {
				if err, _ := got.(error); !errors.Is(err, ErrInvalidCommand) {
					t.Fatalf("item %d (type %d): result %s, want %v", i, item.Type, describe(got), ErrInvalidCommand)
				}
				continue
			}
			want := apply(append([]byte{byte(item.Type)}, item.Body...))
			if dg, dw := describe(got), describe(want); dg != dw {
				t.Fatalf("item %d (type %d): result %s in the batch, %s as an entry of its own", i, item.Type, dg, dw)
			}
		}
		if ha, hb := a.f.Hash(), b.f.Hash(); ha != hb {
			t.Fatalf("Hash() = %s after the batch, %s after its items one by one", ha, hb)
		}
		for tb := range numTables {
			if ia, ib := a.f.Index(tb), b.f.Index(tb); ia != ib {
				t.Fatalf("Index(%d) = %d after the batch, %d after its items one by one", tb, ia, ib)
			}
		}
		// A batch whose every item was refused changes no table (the
		// time moves, as for any refused command).
		refusedAll := true
		for _, r := range res.Results {
			if _, isErr := r.(error); !isErr {
				refusedAll = false
			}
		}
		if after := capture(a.f); refusedAll && after.tables != before.tables {
			t.Fatalf("tables after a batch of refused items =\n%s\nwant\n%s", after.tables, before.tables)
		}
	})
}

// mustEncodeT encodes cmd or fails the test.
func mustEncodeT(t *testing.T, cmd Command) []byte {
	t.Helper()
	data, err := Encode(cmd)
	if err != nil {
		t.Fatalf("Encode(%T) error = %v", cmd, err)
	}
	return data
}
