package fsm

import "testing"

func TestFSM_Watch(t *testing.T) {
	registered := func(h *harness) { h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp")) }
	tests := []struct {
		name      string
		table     Table
		setup     func(h *harness)
		cmd       Command
		wantWoken bool
	}{
		{name: "register wakes resources", table: TableResources, cmd: registerCmd(t0, memberCaller, "machine:mbp", "mbp"), wantWoken: true},
		{name: "token issue does not wake resources", table: TableResources, cmd: IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne}},
		{name: "token issue wakes tokens", table: TableTokens, cmd: IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne}, wantWoken: true},
		{name: "token revoke wakes tokens", table: TableTokens, cmd: RevokeToken{Header: Header{Now: t0}, Machine: "base"}, wantWoken: true},
		{name: "heartbeat wakes resources", table: TableResources, setup: registered, cmd: HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"}, wantWoken: true},
		{name: "heartbeat does not wake primary", table: TablePrimary, setup: registered, cmd: HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"}},
		{name: "heartbeat does not wake leases", table: TableLeases, setup: registered, cmd: HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"}},
		{name: "delete wakes resources", table: TableResources, setup: registered, cmd: DeleteResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:mbp"}, wantWoken: true},
		{name: "acquire wakes leases", table: TableLeases, cmd: acquireCmd(t0, memberCaller, "lease-1"), wantWoken: true},
		{name: "acquire does not wake resources", table: TableResources, cmd: acquireCmd(t0, memberCaller, "lease-1")},
		{name: "renew wakes leases", table: TableLeases, cmd: RenewLease{Header: Header{Now: t0 + 1}, Caller: memberCaller, Port: 31450, LeaseID: "lease-base"}, wantWoken: true},
		{name: "release wakes leases", table: TableLeases, cmd: ReleaseLease{Header: Header{Now: t0}, Caller: memberCaller, Port: 31450, LeaseID: "lease-base"}, wantWoken: true},
		{name: "idempotent acquire wakes nothing", table: TableLeases, cmd: func() Command {
			c := acquireCmd(t0, memberCaller, "lease-retry")
			c.IdempotencyKey = "idem-base"
			return c
		}()},
		{name: "claim wakes primary", table: TablePrimary, cmd: ClaimPrimary{Header: Header{Now: t0}, Holder: "node-b"}, wantWoken: true},
		{name: "claim wakes resources (rebase)", table: TableResources, cmd: ClaimPrimary{Header: Header{Now: t0}, Holder: "node-b"}, wantWoken: true},
		{name: "claim does not wake tokens", table: TableTokens, cmd: ClaimPrimary{Header: Header{Now: t0}, Holder: "node-b"}},
		{name: "sweep with nothing due wakes nothing", table: TableResources, cmd: Sweep{Header: Header{Now: t0 + 1}}},
		{name: "sweep expiring a resource wakes resources", table: TableResources, cmd: Sweep{Header: Header{Now: t0 + ttl}}, wantWoken: true},
		{name: "refused command wakes nothing", table: TableLeases, cmd: ReleaseLease{Header: Header{Now: t0}, Caller: otherCaller, Port: 31450, LeaseID: "lease-base"}},
		{name: "refused claim wakes nothing", table: TablePrimary, cmd: ClaimPrimary{Header: Header{Now: t0}, Holder: "NODE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newBaseline(t)
			if tt.setup != nil {
				tt.setup(h)
			}
			index, ch := h.f.Watch(tt.table)
			if index != h.f.Index(tt.table) {
				t.Fatalf("Watch() index = %d, want Index() %d", index, h.f.Index(tt.table))
			}
			h.apply(tt.cmd)
			if got := isClosed(ch); got != tt.wantWoken {
				t.Errorf("Watch(%d) channel closed = %v, want %v", tt.table, got, tt.wantWoken)
			}
			wantIndex := index
			if tt.wantWoken {
				wantIndex = h.index
			}
			if got, _ := h.f.Watch(tt.table); got != wantIndex {
				t.Errorf("Watch(%d) index = %d, want %d", tt.table, got, wantIndex)
			}
		})
	}
}

// The primary table's index is the claim's log index, whatever comes after.
func TestFSM_WatchPrimaryIndex(t *testing.T) {
	h := newBaseline(t)
	h.term = 8
	claim := mustResult[Primary](h, ClaimPrimary{Header: Header{Now: t0 + 1}, Holder: "node-c", GraceMs: 1})
	claimIndex := h.index
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 2}, Caller: memberCaller, ID: "machine:base"})
	h.mustApply(acquireCmd(t0+3, memberCaller, "lease-2"))
	h.mustApply(Sweep{Header: Header{Now: t0 + 4}})
	index, _ := h.f.Watch(TablePrimary)
	if index != claimIndex || claim.Index != claimIndex || h.f.Primary().Index != claimIndex {
		t.Errorf("Watch(TablePrimary) index = %d, claim index %d, Primary().Index %d, want all %d",
			index, claim.Index, h.f.Primary().Index, claimIndex)
	}
}
