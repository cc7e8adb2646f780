package fsm

import (
	"errors"
	"testing"
)

// Precheck refuses exactly what Apply would refuse for the commands it
// judges, and changes nothing.
func TestFSM_Precheck(t *testing.T) {
	h, mbp, l := format2Mbp(t)
	revoked := tokenCaller("d000000000000000", "mbp", tokenSumTwo)
	cmds := []Command{
		HeartbeatResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:mbp"},
		HeartbeatResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:nobody"},
		HeartbeatResource{Header: Header{Now: t0}, Caller: revoked, ID: "machine:mbp"},
		HeartbeatResource{Header: Header{Now: t0}, Caller: memberCaller, ID: ""},
		HeartbeatResource{Header: Header{Now: t0 + 2*ttl}, Caller: mbp, ID: "machine:mbp"}, // expired by then
		DeleteResource{Header: Header{Now: t0}, Caller: tokenCaller("e0", "studio", tokenSumThree), ID: "machine:mbp"},
		RenewLease{Header: Header{Now: t0}, Caller: mbp, Port: l.Port, LeaseID: l.LeaseID},
		RenewLease{Header: Header{Now: t0}, Caller: mbp, Port: l.Port, LeaseID: "other"},
		RenewLease{Header: Header{Now: t0}, Caller: adminCaller, Port: l.Port, LeaseID: l.LeaseID},
		RenewLease{Header: Header{Now: t0}, Caller: mbp, Port: bandHigh, LeaseID: l.LeaseID},
		ReleaseLease{Header: Header{Now: t0}, Caller: adminCaller, Port: l.Port, LeaseID: l.LeaseID},
		ReleaseLease{Header: Header{Now: t0}, Caller: otherCaller, Port: l.Port, LeaseID: l.LeaseID},
		DeleteResource{Header: Header{Now: t0}, Caller: mbp, ID: "machine:mbp"},
	}
	for i, cmd := range cmds {
		before := capture(h.f)
		pre := h.f.Precheck(cmd, cmd.header().Now)
		if after := capture(h.f); after != before {
			t.Fatalf("Precheck(%d %T) changed the state", i, cmd)
		}
		// Apply the same command on a copy of the state.
		g := New()
		if err := restore(t, g, persist(t, h.f)); err != nil {
			t.Fatal(err)
		}
		gh := &harness{t: t, f: g, index: h.index, term: h.term}
		res := gh.apply(cmd)
		applyErr, _ := res.(error)
		if (pre == nil) != (applyErr == nil) || (pre != nil && !errors.Is(pre, errors.Unwrap(applyErr)) && pre.Error() != applyErr.Error()) {
			t.Errorf("command %d %T: Precheck = %v, Apply = %v; want the same verdict", i, cmd, pre, applyErr)
		}
	}
	// Commands it does not judge pass.
	if err := h.f.Precheck(registerCmd(t0, memberCaller, "machine:new", "new"), t0); err != nil {
		t.Errorf("Precheck(register) = %v, want nil", err)
	}
}

// From format 2 a register or an acquire past a quota, or a machine id that
// names another machine, is refused by Precheck as by Apply; one under the
// quota passes both.
func TestFSM_PrecheckQuotas(t *testing.T) {
	h := atFormat(t, 2)
	h.mustApply(SetLimits{Header: Header{Now: t0}, Limits: Limits{ResourcesPerMachine: 1, LeasesPerMachine: 1}})
	reg := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
	if err := h.f.Precheck(reg, t0); err != nil {
		t.Fatalf("Precheck(first register) = %v, want nil", err)
	}
	h.mustApply(reg)
	if err := h.f.Precheck(reg, t0); err != nil {
		t.Errorf("Precheck(the same register again) = %v, want nil (an upsert adds nothing)", err)
	}
	second := registerCmd(t0, memberCaller, "instance:mbp/1", "mbp")
	second.Kind = "instance"
	squat := registerCmd(t0, memberCaller, "machine:other", "mbp")
	acq := acquireCmd(t0, memberCaller, "lease-2") // the baseline holds mbp's one lease
	for _, tt := range []struct {
		cmd  Command
		want error
	}{{second, ErrQuotaExceeded}, {squat, ErrInvalidCommand}, {acq, ErrQuotaExceeded}} {
		if err := h.f.Precheck(tt.cmd, t0); !errors.Is(err, tt.want) {
			t.Errorf("Precheck(%T) = %v, want %v", tt.cmd, err, tt.want)
		}
		if err, _ := h.apply(tt.cmd).(error); !errors.Is(err, tt.want) {
			t.Errorf("Apply(%T) = %v, want %v", tt.cmd, err, tt.want)
		}
	}
	// Once mbp's lease is due, an acquire may replace it: Precheck lets it through.
	if err := h.f.Precheck(acquireCmd(t0+10*ttl, memberCaller, "lease-3"), t0+10*ttl); err != nil {
		t.Errorf("Precheck(acquire while the machine's lease is due) = %v, want nil", err)
	}
}
