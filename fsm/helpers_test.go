package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// Times and terms used across the tests. t0 is 2023-11-14T22:13:20.000Z.
const (
	t0       int64  = 1_700_000_000_000
	ttl      int64  = 600_000
	baseTerm uint64 = 3
	bandLow         = wire.DefaultBandStart
	bandHigh        = wire.DefaultBandEnd
)

// Callers as the API layer would build them.
var (
	adminCaller   = Caller{Owner: "a000000000000000", Admin: true}
	memberCaller  = Caller{Owner: "b000000000000000"}
	otherCaller   = Caller{Owner: "c000000000000000"}
	mbpCaller     = Caller{Owner: "d000000000000000", Machine: "mbp"}
	studioCaller  = Caller{Owner: "e000000000000000", Machine: "studio"}
	tokenSumOne   = sumHex("token-one")
	tokenSumTwo   = sumHex("token-two")
	tokenSumThree = sumHex("token-three")
)

// harness feeds encoded commands to an FSM as raft would: consecutive
// indexes, the current term, LogCommand entries.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	term  uint64
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: New(), term: baseTerm}
}

// entry encodes cmd as the next log entry.
func (h *harness) entry(cmd Command) *raft.Log {
	h.t.Helper()
	data, err := Encode(cmd)
	if err != nil {
		h.t.Fatalf("Encode(%T) error = %v", cmd, err)
	}
	h.index++
	return &raft.Log{Index: h.index, Term: h.term, Type: raft.LogCommand, Data: data}
}

// rawEntry makes data the next log entry.
func (h *harness) rawEntry(data []byte) *raft.Log {
	h.index++
	return &raft.Log{Index: h.index, Term: h.term, Type: raft.LogCommand, Data: data}
}

// raw applies data as the next log entry.
func (h *harness) raw(data []byte) interface{} { return h.f.Apply(h.rawEntry(data)) }

func (h *harness) apply(cmd Command) interface{} {
	h.t.Helper()
	return h.f.Apply(h.entry(cmd))
}

func (h *harness) mustApply(cmd Command) interface{} {
	h.t.Helper()
	res := h.apply(cmd)
	if err, ok := res.(error); ok {
		h.t.Fatalf("Apply(%T) = %v, want success", cmd, err)
	}
	return res
}

// mustResult applies cmd and returns its result as a T.
func mustResult[T any](h *harness, cmd Command) T {
	h.t.Helper()
	res := h.mustApply(cmd)
	v, ok := res.(T)
	if !ok {
		var want T
		h.t.Fatalf("Apply(%T) = %T %v, want a %T", cmd, res, res, want)
	}
	return v
}

// newBaseline returns a harness holding the baseline.
func newBaseline(t testing.TB) *harness {
	t.Helper()
	h := newHarness(t)
	h.baseline()
	return h
}

// atFormat returns a harness holding the baseline, raised one level at a
// time to format level (1: not raised). From TimelineFormat on, the
// timeline starts with the baseline's claim.
func atFormat(t testing.TB, level int) *harness {
	t.Helper()
	h := newBaseline(t)
	for l := 2; l <= level; l++ {
		h.mustApply(SetFormat{Header: Header{Now: t0}, Level: l})
	}
	return h
}

// baseline gives the FSM one of everything at t0: a claim, a resource, a
// lease with an idempotency key and a token. Error cases start from it so
// "unchanged" covers every table.
func (h *harness) baseline() {
	h.t.Helper()
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	h.mustApply(registerCmd(t0, memberCaller, "machine:base", "base"))
	a := acquireCmd(t0, memberCaller, "lease-base")
	a.IdempotencyKey = "idem-base"
	h.mustApply(a)
	h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "base", SHA256: tokenSumThree})
}

func registerCmd(now int64, caller Caller, id, machine string) RegisterResource {
	return RegisterResource{
		Header: Header{Now: now}, Caller: caller, ID: id, Kind: "machine", Name: machine, Machine: machine,
		Attrs: attrs(`{"load":0.5}`), ObservedAt: now, TTLMs: ttl,
	}
}

// registerMbp registers machine:mbp for memberCaller at t0 with a TTL of
// ttlMs.
func registerMbp(h *harness, ttlMs int64) {
	h.t.Helper()
	c := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
	c.TTLMs = ttlMs
	h.mustApply(c)
}

func acquireCmd(now int64, caller Caller, leaseID string) AcquireLease {
	machine := "mbp"
	if caller.Machine != "" {
		machine = caller.Machine
	}
	return AcquireLease{
		Header: Header{Now: now}, Caller: caller, LeaseID: leaseID, Machine: machine, Purpose: "integration test",
		TTLMs: ttl, BandStart: bandLow, BandEnd: bandHigh,
	}
}

// attrs parses a JSON object into an attrs map (values kept compact).
func attrs(s string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	for k, v := range m {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			panic(err)
		}
		m[k] = buf.Bytes()
	}
	return m
}

// bigAttrs returns attrs whose JSON encoding is exactly size bytes:
// {"k":"xxx…"} is 8 bytes plus the x's.
func bigAttrs(key string, size int) map[string]json.RawMessage {
	n := size - len(`{"":""}`) - len(key)
	return map[string]json.RawMessage{key: json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
}

// stateOf is what an error must leave alone.
type stateOf struct {
	hash    string
	tables  string // the canonical document without lastNow
	lastNow int64
}

func capture(f *FSM) stateOf {
	v, _ := f.view()
	v.lastNow = 0
	var buf bytes.Buffer
	if err := v.write(&buf, 0); err != nil {
		panic(err)
	}
	return stateOf{hash: f.Hash(), tables: buf.String(), lastNow: f.LastNow()}
}

// assertUnchanged checks that a refused command changed no table. Every
// applied command moves lastNow to its clamped now (see Apply), so Hash is
// compared only when that now did not pass lastNow; otherwise the tables are
// compared and lastNow must equal the clamped now.
func assertUnchanged(t *testing.T, f *FSM, before stateOf, cmdNow int64) {
	t.Helper()
	after := capture(f)
	if after.tables != before.tables {
		t.Errorf("tables after refused command =\n%s\nwant\n%s", after.tables, before.tables)
	}
	wantNow := max(before.lastNow, cmdNow)
	if after.lastNow != wantNow {
		t.Errorf("LastNow() = %d, want %d", after.lastNow, wantNow)
	}
	if cmdNow <= before.lastNow && after.hash != before.hash {
		t.Errorf("Hash() = %s, want %s (unchanged)", after.hash, before.hash)
	}
}

// applyCase is one row of an Apply table test. With wantErr set, the result
// must be an error matching every one of them and the state must not change;
// otherwise check inspects the result.
type applyCase struct {
	name    string
	setup   func(h *harness)
	cmd     func(h *harness) Command
	wantErr []error
	check   func(t *testing.T, h *harness, res interface{})
}

func runApplyCases(t *testing.T, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newBaseline(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			cmd := tc.cmd(h)
			before := capture(h.f)
			res := h.apply(cmd)
			if len(tc.wantErr) > 0 {
				err, ok := res.(error)
				if !ok {
					t.Fatalf("Apply() = %#v, want error %v", res, tc.wantErr[0])
				}
				for _, want := range tc.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("Apply() = %v, want errors.Is(err, %v)", err, want)
					}
				}
				cmdNow := cmd.header().Now
				if _, ok := cmd.(ClaimPrimary); ok {
					cmdNow = math.MinInt64 // a refused claim leaves lastNow alone
				}
				assertUnchanged(t, h.f, before, cmdNow)
				return
			}
			if err, ok := res.(error); ok {
				t.Fatalf("Apply() = %v, want success", err)
			}
			if tc.check != nil {
				tc.check(t, h, res)
			}
		})
	}
}

// constant returns a cmd function for a command that needs no harness.
func constant(cmd Command) func(*harness) Command {
	return func(*harness) Command { return cmd }
}

// invalidCase is the case name: base changed by mutate, which Apply refuses
// with an error matching each of wantErr.
func invalidCase[C Command](name string, base C, mutate func(*C), wantErr ...error) applyCase {
	mutate(&base)
	return applyCase{name: name, cmd: constant(base), wantErr: wantErr}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func jsonOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// sumHex is the stored form of a machine token.
func sumHex(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// sha256Sum is what the API hands MachineForToken for a presented token.
func sha256Sum(token string) [32]byte { return sha256.Sum256([]byte(token)) }
