package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// format2Mbp is atFormat(t, 2) with a token of machine mbp issued (tokenSumOne),
// its machine registered and a lease (lease-mbp) acquired through it; it
// returns the token's caller and the lease.
func format2Mbp(t *testing.T) (*harness, Caller, PortLease) {
	t.Helper()
	h := atFormat(t, 2)
	h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne})
	mbp := tokenCaller("d000000000000000", "mbp", tokenSumOne)
	h.mustApply(registerCmd(t0, mbp, "machine:mbp", "mbp"))
	l := mustResult[PortLease](h, acquireCmd(t0, mbp, "lease-mbp"))
	return h, mbp, l
}

// tokenCaller is a machine token's caller as the API builds it at format 2.
func tokenCaller(owner, machine, sum string) Caller {
	return Caller{Owner: owner, Machine: machine, TokenSHA256: sum}
}

func TestFSM_Format2Quotas(t *testing.T) {
	t.Run("resources per machine", func(t *testing.T) {
		h := atFormat(t, 2)
		h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: Limits{ResourcesPerMachine: 2}})
		h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp"))
		inst := registerCmd(t0, memberCaller, "instance:mbp/1", "mbp")
		inst.Kind = "instance"
		h.mustApply(inst)
		// Re-registering one it holds adds nothing; a third is refused.
		h.mustApply(inst)
		third := inst
		third.ID = "instance:mbp/2"
		before := capture(h.f)
		if err, _ := h.apply(third).(error); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("Apply(third resource) = %v, want %v", err, ErrQuotaExceeded)
		}
		assertUnchanged(t, h.f, before, t0)
		// Another machine is not affected; a deleted one frees a place.
		h.mustApply(registerCmd(t0, memberCaller, "machine:studio", "studio"))
		h.mustApply(DeleteResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "instance:mbp/1"})
		h.mustApply(third)
	})
	t.Run("resources in the cluster", func(t *testing.T) {
		h := atFormat(t, 2)
		h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: Limits{Resources: 3}}) // the baseline holds one
		h.mustApply(registerCmd(t0, memberCaller, "machine:a", "a"))
		h.mustApply(registerCmd(t0, memberCaller, "machine:b", "b"))
		if err, _ := h.apply(registerCmd(t0, memberCaller, "machine:c", "c")).(error); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("Apply(fourth resource) = %v, want %v", err, ErrQuotaExceeded)
		}
		h.mustApply(registerCmd(t0+1, memberCaller, "machine:a", "a")) // an upsert still works
	})
	t.Run("leases per machine, a quarter of the band by default", func(t *testing.T) {
		h := atFormat(t, 2)
		limit := (bandHigh - bandLow + 1) / 4
		for i := range limit - 1 { // the baseline holds one lease of mbp

			h.mustApply(acquireCmd(t0, memberCaller, fmt.Sprintf("lease-%d", i)))
		}
		if err, _ := h.apply(acquireCmd(t0, memberCaller, "lease-over")).(error); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("Apply(acquire %d) = %v, want %v", limit+1, err, ErrQuotaExceeded)
		}
		// Once one expires (awaiting its sweep), its port can be taken again.
		studio := Caller{Owner: "e000000000000000"}
		short := acquireCmd(t0, studio, "lease-short")
		short.Machine, short.TTLMs = "studio", 10
		h.mustApply(short)
		again := acquireCmd(t0+20, studio, "lease-again")
		again.Machine = "studio"
		if _, ok := h.apply(again).(PortLease); !ok {
			t.Errorf("studio's second acquire was refused")
		}
	})
	t.Run("idempotency keys are bounded, oldest first", func(t *testing.T) {
		h := atFormat(t, 2)
		h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: Limits{IdempotencyKeys: 2}})
		for i := range 3 {
			a := acquireCmd(t0+int64(i), Caller{Owner: fmt.Sprintf("o%d", i)}, fmt.Sprintf("lease-%d", i))
			a.Machine, a.IdempotencyKey = fmt.Sprintf("m%d", i), "k"
			h.mustApply(a)
		}
		h.f.mu.RLock()
		n, _, oldest := len(h.f.st.idem), 0, h.f.st.idem["o0/k"]
		h.f.mu.RUnlock()
		if n != 2 || oldest.Key != "" {
			t.Errorf("remembered keys = %d (o0/k %+v), want 2 with the oldest forgotten", n, oldest)
		}
	})
	t.Run("no quota at format 1", func(t *testing.T) {
		h := newBaseline(t)
		for i := range 20 {
			h.mustApply(acquireCmd(t0, mbpCaller, fmt.Sprintf("lease-%d", i)))
		}
	})
}

func TestFSM_Format2MachineIDs(t *testing.T) {
	h := atFormat(t, 2)
	squat := registerCmd(t0, memberCaller, "machine:studio", "mbp")
	if err, _ := h.apply(squat).(error); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("Apply(machine:studio for mbp) = %v, want %v", err, ErrInvalidCommand)
	}
	inst := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
	inst.Kind = "instance"
	if err, _ := h.apply(inst).(error); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("Apply(instance with a machine id) = %v, want %v", err, ErrInvalidCommand)
	}
	h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp"))
	// Format 1 kept the old meaning.
	old := newBaseline(t)
	old.mustApply(squat)
}

// A command authorised by a machine token that was revoked, or re-issued,
// before the command was applied is refused; the current token works.
func TestFSM_Format2RevokedTokenBites(t *testing.T) {
	h, mbp, l := format2Mbp(t)

	// Revoked between authentication and apply.
	h.mustApply(RevokeToken{Header: Header{Now: t0}, Machine: "mbp"})
	for _, cmd := range []Command{
		HeartbeatResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:mbp"},
		RenewLease{Header: Header{Now: t0}, Caller: mbp, Port: l.Port, LeaseID: l.LeaseID},
		ReleaseLease{Header: Header{Now: t0}, Caller: mbp, Port: l.Port, LeaseID: l.LeaseID},
		DeleteResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:mbp"},
		registerCmd(t0, mbp, "machine:mbp", "mbp"),
		acquireCmd(t0, mbp, "lease-2"),
	} {
		before := capture(h.f)
		if err, _ := h.apply(cmd).(error); !errors.Is(err, ErrTokenRevoked) {
			t.Errorf("Apply(%T) with a revoked token = %v, want %v", cmd, err, ErrTokenRevoked)
		}
		assertUnchanged(t, h.f, before, t0)
	}
	// Re-issued: the old token stays refused, the new one works.
	h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumTwo})
	if err, _ := h.apply(HeartbeatResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:mbp"}).(error); !errors.Is(err, ErrTokenRevoked) {
		t.Errorf("Apply(heartbeat) with the replaced token = %v, want %v", err, ErrTokenRevoked)
	}
	h.mustApply(HeartbeatResource{Header: Header{Now: t0}, Caller: tokenCaller("e000000000000000", "mbp", tokenSumTwo), ID: "machine:mbp"})
	// Cluster tokens (no machine) are not concerned.
	h.mustApply(HeartbeatResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:mbp"})
}

func TestFSM_CandidateDirectory(t *testing.T) {
	h := atFormat(t, 2)
	d := Candidate{Machine: "node-d", URL: "https://10.0.0.4:31413", Raft: "10.0.0.4:31412"}
	got := mustResult[Candidate](h, PutCandidate{Header: Header{Now: t0 + 5}, Candidate: d})
	if got.AddedAt != t0+5 {
		t.Errorf("PutCandidate AddedAt = %d, want %d", got.AddedAt, t0+5)
	}
	d.Voter = true
	got = mustResult[Candidate](h, PutCandidate{Header: Header{Now: t0 + 9}, Candidate: d})
	if !got.Voter || got.AddedAt != t0+5 {
		t.Errorf("PutCandidate (promote) = %+v, want a voter added at %d", got, t0+5)
	}
	if cs := h.f.Candidates(); len(cs) != 1 || cs[0] != got {
		t.Errorf("Candidates() = %+v, want [%+v]", cs, got)
	}
	for _, bad := range []Candidate{
		{Machine: "Node-D", URL: "https://h:1", Raft: "h:2"},
		{Machine: "node-e", URL: "https://H:1", Raft: "h:2"},
		{Machine: "node-e", URL: "https://h:1/x", Raft: "h:2"},
		{Machine: "node-e", URL: "https://h:1", Raft: "h"},
		{Machine: "node-e", URL: "https://h:1", Raft: "h:0"},
	} {
		if err, _ := h.apply(PutCandidate{Header: Header{Now: t0}, Candidate: bad}).(error); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("PutCandidate(%+v) = %v, want %v", bad, err, ErrInvalidCommand)
		}
	}
	h.mustApply(RemoveCandidate{Header: Header{Now: t0}, Machine: "node-d"})
	if err, _ := h.apply(RemoveCandidate{Header: Header{Now: t0}, Machine: "node-d"}).(error); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveCandidate(absent) = %v, want %v", err, ErrNotFound)
	}
	// Format 1 has no directory.
	old := newBaseline(t)
	if err, _ := old.apply(PutCandidate{Header: Header{Now: t0}, Candidate: d}).(error); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("PutCandidate at format 1 = %v, want %v", err, ErrInvalidCommand)
	}
}

// Every quota, the id rule and the token check apply identically from a
// replayed log and after a snapshot restore: the same refusals, the same state.
// The log is written so that each quota bites (resources per machine,
// resources in the cluster, leases per machine, the bound on remembered
// Idempotency-Keys) and then, once a Sweep has freed places, admits again;
// every entry's outcome is asserted, so a quota that stops biting, or one that
// bites the wrong entry, fails here rather than passing a count.
func TestFSM_Format2Replay(t *testing.T) {
	limits := Limits{ResourcesPerMachine: 3, Resources: 8, LeasesPerMachine: 2, IdempotencyKeys: 3}
	setup := func() *harness {
		h := atFormat(t, 2) // the baseline holds machine:base, mbp's lease on 31450 and the key idem-base
		h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: limits})
		h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne})
		return h
	}
	at := func(s int64) int64 { return t0 + s*1000 }
	instance := func(s int64, machine string, n int) RegisterResource {
		r := registerCmd(at(s), memberCaller, fmt.Sprintf("instance:%s/%d", machine, n), machine)
		r.Kind, r.TTLMs = "instance", 5000
		return r
	}
	machine := func(s int64, name string) RegisterResource {
		return registerCmd(at(s), memberCaller, "machine:"+name, name)
	}
	acquire := func(s int64, machine, leaseID, key string, ttlMs int64) AcquireLease {
		a := acquireCmd(at(s), Caller{Owner: "o-" + machine}, leaseID)
		a.Machine, a.IdempotencyKey, a.TTLMs = machine, key, ttlMs
		return a
	}
	mbp := tokenCaller("d000000000000000", "mbp", tokenSumOne)

	// What an entry must do: apply (""), be refused by the named quota, or be
	// refused for another named reason. A granted acquire must be a grant of
	// its own lease id, not the replay of an earlier one.
	const (
		perMachine = "resourcesPerMachine"
		inCluster  = "resources"
		leases     = "leasesPerMachine"
		keyUsed    = "idempotency key used"
		revoked    = "token revoked"
		machineID  = "machine id rule"
	)
	steps := []struct {
		cmd  Command
		want string
	}{
		// The token check. The cluster then holds machine:base and machine:mbp.
		{registerCmd(at(1), mbp, "machine:mbp", "mbp"), ""},
		{RevokeToken{Header: Header{Now: at(1)}, Machine: "mbp"}, ""},
		{registerCmd(at(1), mbp, "machine:mbp", "mbp"), revoked},
		// Resources per machine: m0's fourth is refused; re-registering
		// one it holds adds nothing. The cluster holds 5.
		{instance(1, "m0", 1), ""},
		{instance(1, "m0", 2), ""},
		{instance(1, "m0", 3), ""},
		{instance(1, "m0", 4), perMachine},
		{instance(1, "m0", 1), ""},
		// Resources in the cluster: m4 has none, the cluster has 8.
		{machine(2, "m1"), ""},
		{machine(2, "m2"), ""},
		{machine(2, "m3"), ""},
		{machine(2, "m4"), inCluster},
		// The machine id rule.
		{registerCmd(at(2), memberCaller, "machine:m1", "x-m1"), machineID},
		// Leases per machine: mbp holds the baseline's; m0 gets two.
		{acquire(3, "m0", "lease-a", "", 5000), ""},
		{acquire(3, "m0", "lease-b", "", 5000), ""},
		{acquire(3, "m0", "lease-c", "", 5000), leases},
		// The Idempotency-Key bound. m1's key outlives its lease: while
		// remembered, a retry is refused. Two more keys push it out (idem-base
		// first, the earliest to end), long before its retention, so the
		// same retry is then granted anew.
		{acquire(4, "m1", "lease-k", "k-old", 1000), ""},
		{Sweep{Header: Header{Now: at(6)}}, ""}, // m0's instances and lease-k are due
		{acquire(6, "m1", "lease-k-retry", "k-old", 1000), keyUsed},
		{acquire(7, "m2", "lease-k2", "k2", ttl), ""},
		{acquire(7, "m3", "lease-k3", "k3", ttl), ""},
		{acquire(8, "m4", "lease-k4", "k4", ttl), ""},
		{acquire(8, "m1", "lease-k-again", "k-old", ttl), ""},
		// A Sweep frees places: every quota admits again.
		{Sweep{Header: Header{Now: at(9)}}, ""}, // m0's leases are due
		{instance(9, "m0", 4), ""},
		{machine(9, "m4"), ""},
		{acquire(9, "m0", "lease-c", "", 5000), ""},
	}
	outcome := func(res any) string {
		err, ok := res.(error)
		switch {
		case !ok:
			return ""
		case errors.Is(err, ErrQuotaExceeded):
			for _, q := range []string{perMachine, inCluster, leases} {
				if strings.Contains(err.Error(), "(limit "+q+" ") {
					return q
				}
			}
		case errors.Is(err, ErrIdempotencyKeyUsed):
			return keyUsed
		case errors.Is(err, ErrTokenRevoked):
			return revoked
		case errors.Is(err, ErrInvalidCommand):
			return machineID
		}
		return err.Error()
	}
	// rendered is what the replicas must agree on: the whole result.
	rendered := func(res any) string {
		if err, ok := res.(error); ok {
			return err.Error()
		}
		return fmt.Sprintf("%T %s", res, jsonOf(res))
	}
	remembered := func(f *FSM) []string {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return slices.Sorted(maps.Keys(f.st.idem))
	}

	h := setup()
	start := h.index
	mid := len(steps) / 2
	var results []string
	var midSnapshot []byte
	bit := map[string]int{}
	for i, s := range steps {
		before := remembered(h.f)
		res := h.apply(s.cmd)
		results = append(results, rendered(res))
		got := outcome(res)
		if got != s.want {
			t.Errorf("step %d: Apply(%T) = %q (%v), want %q", i, s.cmd, got, res, s.want)
		}
		bit[got]++
		if a, ok := s.cmd.(AcquireLease); ok && got == "" {
			if l, _ := res.(PortLease); l.LeaseID != a.LeaseID {
				t.Errorf("step %d: acquire %s answered lease %s, want a grant of its own", i, a.LeaseID, l.LeaseID)
			}
		}
		after := remembered(h.f)
		if len(after) > limits.IdempotencyKeys {
			t.Errorf("step %d: %d keys remembered, want at most %d", i, len(after), limits.IdempotencyKeys)
		}
		if _, sweep := s.cmd.(Sweep); !sweep {
			for _, k := range before {
				if !slices.Contains(after, k) {
					bit["idempotencyKeys"]++ // forgotten by the bound, not by a Sweep
				}
			}
		}
		if i == mid-1 {
			midSnapshot = persist(t, h.f)
		}
	}
	for _, kind := range []string{perMachine, inCluster, leases, "idempotencyKeys", keyUsed, revoked, machineID} {
		if bit[kind] == 0 {
			t.Errorf("%q never bit (outcomes %v): the log must exercise every quota, the token check and the id rule", kind, bit)
		}
	}

	// Replay the same entries on a fresh replica, and the second half on a
	// replica restored from the snapshot taken half way.
	g := setup()
	if g.index != start {
		t.Fatalf("replica at index %d, want %d", g.index, start)
	}
	r := &harness{t: t, f: New(), index: start + uint64(mid), term: baseTerm}
	if err := restore(t, r.f, midSnapshot); err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		if got := rendered(g.apply(s.cmd)); got != results[i] {
			t.Errorf("step %d replayed: %q, want %q", i, got, results[i])
		}
		if i < mid {
			continue
		}
		if got := rendered(r.apply(s.cmd)); got != results[i] {
			t.Errorf("step %d after the restore: %q, want %q", i, got, results[i])
		}
	}
	for name, f := range map[string]*FSM{"replayed": g.f, "restored half way": r.f} {
		if f.Hash() != h.f.Hash() {
			t.Errorf("Hash() %s = %s, want %s", name, f.Hash(), h.f.Hash())
		}
		checkIndexes(t, f, name)
	}
	restored := New()
	if err := restore(t, restored, persist(t, h.f)); err != nil {
		t.Fatal(err)
	}
	if restored.Hash() != h.f.Hash() {
		t.Errorf("Hash() after restore = %s, want %s", restored.Hash(), h.f.Hash())
	}
	checkIndexes(t, restored, "restored")
	checkIndexes(t, h.f, "applied")
}

// An acquire retried under its Idempotency-Key after a while gets its lease
// back renewed from the retry's time (format 2): the retry's caller counts
// the TTL from its own call. At format 1 the replay changes nothing, as the
// first release did (TestFSM_ApplyAcquire's replay case).
func TestFSM_Format2IdempotentReplayRenews(t *testing.T) {
	for _, retention := range []bool{false, true} {
		name := "while the key is remembered"
		if retention {
			name = "after the key's retention, found by the lease's own key"
		}
		t.Run(name, func(t *testing.T) {
			h := atFormat(t, 2)
			first := acquireCmd(t0, memberCaller, "lease-first")
			first.TTLMs, first.IdempotencyKey = 2*IdempotencyRetentionMs, "idem-retry"
			granted := h.mustApply(first).(PortLease)
			at := t0 + 1500
			if retention {
				at = t0 + IdempotencyRetentionMs + 1
				h.mustApply(Sweep{Header: Header{Now: at}}) // forgets the key, not the lease
			}
			retry := first
			retry.Now, retry.LeaseID = at, "lease-retry" // the API draws a new id for every attempt
			got, ok := h.apply(retry).(PortLease)
			if !ok {
				t.Fatalf("Apply(retry) = %v, want the lease", h.apply(retry))
			}
			if got.LeaseID != granted.LeaseID || got.Port != granted.Port || got.Fence != granted.Fence || got.GrantedAt != granted.GrantedAt {
				t.Errorf("retry = %+v, want the first grant %+v", got, granted)
			}
			if got.RenewedAt != at || got.ExpiresAt != at+first.TTLMs {
				t.Errorf("retry renewed %d, expires %d; want %d, %d (its TTL from the retry)", got.RenewedAt, got.ExpiresAt, at, at+first.TTLMs)
			}
			if stored := h.f.st.leases[got.Port]; stored.ExpiresAt != got.ExpiresAt {
				t.Errorf("stored lease expires %d, want %d", stored.ExpiresAt, got.ExpiresAt)
			}
			// Its old expiry no longer sweeps it.
			res := h.mustApply(Sweep{Header: Header{Now: granted.ExpiresAt}}).(SweepResult)
			if slices.Contains(res.Leases, got.Port) {
				t.Errorf("Sweep at the first grant's expiry removed %v, want port %d kept", res.Leases, got.Port)
			}
		})
	}
}
