package fsm

import (
	"errors"
	"testing"
)

// renewalHarness is a format-3 FSM with a resource and a lease of
// memberCaller, both registered at t0.
func renewalHarness(t *testing.T) (*harness, PortLease) {
	t.Helper()
	h := newHarness(t)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 3})
	h.mustApply(registerCmd(t0, memberCaller, "machine:base", "base"))
	h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne})
	l := mustResult[PortLease](h, acquireCmd(t0, memberCaller, "lease-base"))
	return h, l
}

func TestApply_RenewalSlack(t *testing.T) {
	h, l := renewalHarness(t)
	const slack = ttl / 4
	r := mustResult[Resource](h, HeartbeatResource{Header: Header{Now: t0 + 1000}, Caller: memberCaller, ID: "machine:base", SlackMs: slack})
	if want := t0 + 1000 + ttl + slack; r.ExpiresAt != want {
		t.Errorf("heartbeat with slack: expiresAt = %d, want now+ttl+slack %d", r.ExpiresAt, want)
	}
	// A later renewal with no slack whose now+ttl is below the stored expiry keeps it.
	r2 := mustResult[Resource](h, HeartbeatResource{Header: Header{Now: t0 + 2000}, Caller: memberCaller, ID: "machine:base"})
	if r2.ExpiresAt != r.ExpiresAt || r2.RenewedAt != t0+2000 {
		t.Errorf("renewal below the stored expiry: expiresAt %d renewedAt %d, want the expiry kept (%d) and renewedAt moved", r2.ExpiresAt, r2.RenewedAt, r.ExpiresAt)
	}
	// The slack is capped at the TTL.
	got := mustResult[PortLease](h, RenewLease{Header: Header{Now: t0 + 3000}, Caller: memberCaller, Port: l.Port, LeaseID: l.LeaseID, SlackMs: 100 * ttl})
	if want := t0 + 3000 + 2*l.TTLMs; got.ExpiresAt != want {
		t.Errorf("lease renewal with a slack past the TTL: expiresAt = %d, want now+2·ttl %d", got.ExpiresAt, want)
	}
	before := capture(h.f)
	if err, _ := h.apply(RenewLease{Header: Header{Now: t0 + 4000}, Caller: memberCaller, Port: l.Port, LeaseID: l.LeaseID, SlackMs: -1}).(error); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("negative slack: Apply = %v, want ErrInvalidCommand", err)
	}
	assertUnchanged(t, h.f, before, t0+4000)
}

// Up to format 2 a slack is ignored, as the builds of those formats ignore a
// field they do not know.
func TestApply_RenewalSlackIgnoredBeforeFormat3(t *testing.T) {
	h := newHarness(t)
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
	h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 2})
	h.mustApply(registerCmd(t0, memberCaller, "machine:base", "base"))
	r := mustResult[Resource](h, HeartbeatResource{Header: Header{Now: t0 + 1000}, Caller: memberCaller, ID: "machine:base", SlackMs: -5})
	if want := t0 + 1000 + ttl; r.ExpiresAt != want {
		t.Errorf("format 2 heartbeat with slack: expiresAt = %d, want now+ttl %d", r.ExpiresAt, want)
	}
}

func TestJudgeRenewal(t *testing.T) {
	h, l := renewalHarness(t)
	const slack = ttl / 4
	hb := func(now int64) HeartbeatResource {
		return HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: "machine:base"}
	}
	renew := RenewLease{Caller: memberCaller, Port: l.Port, LeaseID: l.LeaseID}
	mbpWithToken := mbpCaller
	mbpWithToken.TokenSHA256 = tokenSumOne

	// Registered at t0 with expiry t0+ttl: covered only at t0 exactly.
	if j, err := h.f.JudgeRenewal(hb(0), t0+1); err != nil || j.Covered {
		t.Errorf("fresh record one ms later: JudgeRenewal = %+v, %v; want not covered", j, err)
	}
	mustResult[Resource](h, WithSlack(hb(t0+1000), slack))
	mustResult[PortLease](h, WithSlack(RenewLease{Header: Header{Now: t0 + 1000}, Caller: memberCaller, Port: l.Port, LeaseID: l.LeaseID}, slack))
	expiry := t0 + 1000 + ttl + slack

	for _, tc := range []struct {
		name    string
		cmd     Command
		now     int64
		covered bool
		err     error
	}{
		{"heartbeat within the slack", hb(0), expiry - ttl, true, nil},
		{"heartbeat one ms past the slack", hb(0), expiry - ttl + 1, false, nil},
		{"heartbeat with the stored attrs", HeartbeatResource{Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"load":0.5}`)}, t0 + 2000, true, nil},
		{"heartbeat with new attrs", HeartbeatResource{Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"load":0.6}`)}, t0 + 2000, false, nil},
		{"heartbeat with a new attr key", HeartbeatResource{Caller: memberCaller, ID: "machine:base", Attrs: attrs(`{"zone":"a"}`)}, t0 + 2000, false, nil},
		{"heartbeat of an unknown id", HeartbeatResource{Caller: memberCaller, ID: "machine:none"}, t0 + 2000, false, ErrNotFound},
		{"heartbeat of an expired record", hb(0), expiry, false, ErrNotFound},
		{"heartbeat of another machine's record", HeartbeatResource{Caller: mbpWithToken, ID: "machine:base"}, t0 + 2000, false, ErrForbidden},
		{"heartbeat with a revoked machine token", HeartbeatResource{Caller: mbpCaller, ID: "machine:base"}, t0 + 2000, false, ErrTokenRevoked},
		{"lease renewal within the slack", renew, expiry - ttl, true, nil},
		{"lease renewal past the slack", renew, expiry - ttl + 1, false, nil},
		{"lease renewal under another lease id", RenewLease{Caller: memberCaller, Port: l.Port, LeaseID: "other"}, t0 + 2000, false, ErrLeaseMismatch},
		{"lease renewal of a free port", RenewLease{Caller: memberCaller, Port: l.Port + 1, LeaseID: l.LeaseID}, t0 + 2000, false, ErrNotFound},
		{"lease renewal by an admin who does not hold it", RenewLease{Caller: adminCaller, Port: l.Port, LeaseID: l.LeaseID}, t0 + 2000, false, ErrForbidden},
		{"not a renewal", DeleteResource{Caller: memberCaller, ID: "machine:base"}, t0 + 2000, false, ErrInvalidCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := capture(h.f)
			j, err := h.f.JudgeRenewal(tc.cmd, tc.now)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("JudgeRenewal error = %v, want %v", err, tc.err)
			}
			if j.Covered != tc.covered {
				t.Fatalf("JudgeRenewal covered = %v, want %v", j.Covered, tc.covered)
			}
			if j.Covered {
				var exp int64
				switch v := j.Value.(type) {
				case Resource:
					exp = v.ExpiresAt
				case PortLease:
					exp = v.ExpiresAt
				}
				if exp != expiry {
					t.Errorf("covered value expires at %d, want the stored %d", exp, expiry)
				}
			}
			if after := capture(h.f); after != before {
				t.Errorf("JudgeRenewal changed the state")
			}
		})
	}
}

// The leader's decision, replayed: a covered renewal is answered with the
// stored record and writes nothing; any other is applied with the slack.
// Every answer expires at or after now + TTL, the stored expiry never moves
// back, and with a slack of a quarter TTL at most one renewal in a few is a
// write.
func TestJudgeRenewal_LeaderDecision(t *testing.T) {
	h, l := renewalHarness(t)
	const slack = ttl / 4
	var last [2]int64
	writes := 0
	const steps = 200
	for step := int64(1); step <= steps; step++ {
		now := t0 + step*ttl/20 // a renewal every twentieth of the TTL
		cmds := []Command{
			HeartbeatResource{Header: Header{Now: now}, Caller: memberCaller, ID: "machine:base"},
			RenewLease{Header: Header{Now: now}, Caller: memberCaller, Port: l.Port, LeaseID: l.LeaseID},
		}
		for i, cmd := range cmds {
			j, err := h.f.JudgeRenewal(cmd, now)
			if err != nil {
				t.Fatalf("step %d: JudgeRenewal(%T) error = %v", step, cmd, err)
			}
			v := j.Value
			if !j.Covered {
				writes++
				v = h.mustApply(WithSlack(cmd, slack))
			}
			var exp int64
			switch r := v.(type) {
			case Resource:
				exp = r.ExpiresAt
			case PortLease:
				exp = r.ExpiresAt
			}
			if exp < now+ttl {
				t.Fatalf("step %d: %T answered expiry %d, below now+ttl %d", step, cmd, exp, now+ttl)
			}
			if exp < last[i] {
				t.Fatalf("step %d: %T expiry moved back from %d to %d", step, cmd, last[i], exp)
			}
			last[i] = exp
		}
	}
	// A slack of 5 renewal periods: one write every 6 renewals.
	if most := 2 * steps / 5; writes > most {
		t.Errorf("%d of %d renewals were writes, want at most %d with a quarter-TTL slack", writes, 2*steps, most)
	}
}
