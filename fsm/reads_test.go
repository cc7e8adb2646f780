package fsm

import (
	"reflect"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

func TestFSM_Resources(t *testing.T) {
	h := newHarness(t)
	h.mustApply(registerCmd(t0, memberCaller, "machine:studio", "studio"))
	h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp"))
	inst := registerCmd(t0, memberCaller, "instance:mbp/2", "mbp")
	inst.Kind = "instance"
	h.mustApply(inst)
	inst.ID = "instance:mbp/1"
	h.mustApply(inst)
	tests := []struct {
		kind, machine string
		want          []string
	}{
		{"", "", []string{"instance:mbp/1", "instance:mbp/2", "machine:mbp", "machine:studio"}},
		{"instance", "", []string{"instance:mbp/1", "instance:mbp/2"}},
		{"", "mbp", []string{"instance:mbp/1", "instance:mbp/2", "machine:mbp"}},
		{"machine", "studio", []string{"machine:studio"}},
		{"machine", "nobody", nil},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.machine, func(t *testing.T) {
			var got []string
			for _, r := range h.f.Resources(tt.kind, tt.machine) {
				got = append(got, r.ID)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resources(%q, %q) = %v, want %v", tt.kind, tt.machine, got, tt.want)
			}
		})
	}
}

func TestFSM_NextExpiry(t *testing.T) {
	h := newHarness(t)
	if got, ok := h.f.NextExpiry(); ok {
		t.Fatalf("NextExpiry() = %d, true on an empty state, want false", got)
	}
	h.baseline() // both expire at t0+ttl
	if got, ok := h.f.NextExpiry(); !ok || got != t0+ttl {
		t.Errorf("NextExpiry() = %d, %v, want %d, true", got, ok, t0+ttl)
	}
	l := acquireCmd(t0, memberCaller, "lease-short")
	l.TTLMs = 10
	h.mustApply(l)
	if got, ok := h.f.NextExpiry(); !ok || got != t0+10 {
		t.Errorf("NextExpiry() = %d, %v, want %d, true", got, ok, t0+10)
	}
	r := registerCmd(t0, memberCaller, "machine:short", "short")
	r.TTLMs = 5
	h.mustApply(r)
	if got, ok := h.f.NextExpiry(); !ok || got != t0+5 {
		t.Errorf("NextExpiry() = %d, %v, want %d, true", got, ok, t0+5)
	}
}

func TestFSM_Hash(t *testing.T) {
	if a, b := New().Hash(), New().Hash(); a != b || len(a) != 64 {
		t.Fatalf("Hash() of empty states = %q, %q, want one 64-hex value", a, b)
	}
	h := newBaseline(t)
	before := h.f.Hash()
	if again := h.f.Hash(); again != before {
		t.Errorf("Hash() = %s then %s, want stable", before, again)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:base"})
	if after := h.f.Hash(); after == before {
		t.Errorf("Hash() unchanged by a heartbeat (revision moved)")
	}
}

// Readers run while raft applies, snapshots and restores: -race checks the
// locking and that no stored map is mutated after it is handed out.
func TestFSM_ConcurrentReads(t *testing.T) {
	h := newBaseline(t)
	snapshotData := persist(t, h.f)
	var entries []Command
	for i := range 300 {
		now := t0 + int64(i)
		switch i % 5 {
		case 0:
			entries = append(entries, registerCmd(now, memberCaller, "machine:base", "base"))
		case 1:
			entries = append(entries, HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"load":1}`)})
		case 2:
			entries = append(entries, RenewLease{Header: Header{Now: now}, Caller: memberCaller, Port: 31450, LeaseID: "lease-base"})
		case 3:
			entries = append(entries, IssueToken{Header: Header{Now: now}, Machine: "base", SHA256: sumHex(string(rune(i)))})
		case 4:
			entries = append(entries, Sweep{Header: Header{Now: now}})
		}
	}
	logs := make([]*raft.Log, len(entries))
	for i, cmd := range entries {
		logs[i] = h.entry(cmd)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, r := range h.f.Resources("", "") {
					_ = jsonOf(r)
				}
				if r, ok := h.f.Resource("machine:base"); ok {
					_ = len(r.Attrs["load"])
				}
				_ = h.f.Hash()
				_, _ = h.f.Watch(TableResources)
				_, _ = h.f.MachineForToken(sha256Sum("token-three"))
				_, _ = h.f.NextExpiry()
				_ = h.f.Leases()
				_ = h.f.Tokens()
				snap, err := h.f.Snapshot()
				if err != nil {
					t.Errorf("Snapshot() error = %v", err)
					return
				}
				if err := snap.Persist(&fakeSink{}); err != nil {
					t.Errorf("Persist() error = %v", err)
				}
			}
		})
	}
	for i, l := range logs {
		h.f.Apply(l)
		if i == len(logs)/2 {
			if err := restore(t, h.f, snapshotData); err != nil {
				t.Errorf("Restore() error = %v", err)
			}
		}
	}
	close(stop)
	wg.Wait()
}
