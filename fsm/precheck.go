package fsm

import "fmt"

// Precheck tells, from this replica's applied state, whether cmd would be
// refused: a heartbeat or delete of a resource that does not exist (or is
// not the caller's machine's), a renew or release of a lease that is not
// live, not the caller's or under another lease id, or a command whose
// machine token was revoked; and, from format 2, a register or an acquire
// that a quota or the machine-id rule refuses. It changes nothing.
//
// The leader calls it before proposing, so a call that would fail never
// becomes a log entry (a flood of heartbeats for random ids costs no disk
// write). It is advice: Apply still decides, and a command Precheck passes may
// be refused by Apply if the state changes in between; it never refuses what
// Apply would accept on the same state. Commands it does not judge (token and
// cluster commands) pass.
func (f *FSM) Precheck(cmd Command, now int64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := applier{table: commandTable, st: f.st, now: max(now, f.st.lastNow)}
	if err := a.authorized(cmd); err != nil {
		return err
	}
	// This switch stays here rather than in the command table: unlike the
	// table's fields, a precheck is optional and its absence is safe (the
	// command is proposed and Apply decides), so there is no decision to
	// force on a new type; and the few cases, which read the state through
	// the helpers Apply uses (liveResource, heldLease, the quotas) and must
	// never refuse what Apply accepts, are easier to check side by side.
	switch c := cmd.(type) {
	case HeartbeatResource:
		if err := c.Validate(); err != nil {
			return err
		}
		_, err := a.liveResource(c.ID, c.Caller)
		return err
	case DeleteResource:
		if err := ValidateResourceID(c.ID); err != nil {
			return err
		}
		_, err := a.liveResource(c.ID, c.Caller)
		return err
	case RenewLease:
		c.Caller.Admin = false // renewal is the owner's alone, as in Apply
		_, err := a.heldLease(c.Port, c.LeaseID, c.Caller)
		return err
	case ReleaseLease:
		_, err := a.heldLease(c.Port, c.LeaseID, c.Caller)
		return err
	case RegisterResource:
		if err := c.Validate(); err != nil || a.st.format < 2 {
			return err
		}
		if err := checkMachineID(c.ID, c.Kind, c.Machine); err != nil {
			return err
		}
		old, exists := a.st.resource(c.ID)
		return a.resourceQuota(c.Machine, old, exists)
	case AcquireLease:
		if err := c.Validate(); err != nil || a.st.format < 2 {
			return err
		}
		// Apply lets a grant replace a due lease of the same machine
		// without counting it; refuse only when no such lease exists.
		held, limit := a.st.leasePerMachine[c.Machine], a.st.limits.leasesPerMachine(c.BandStart, c.BandEnd)
		if held >= limit && !a.machineHasDueLease(c.Machine) {
			return fmt.Errorf("%w: machine %q holds %d port leases (limit leasesPerMachine %d)", ErrQuotaExceeded, c.Machine, held, limit)
		}
	}
	return nil
}

// machineHasDueLease reports whether a lease of machine is due (expired, not
// yet swept). Leases are bounded by the band, so the walk is short.
func (a *applier) machineHasDueLease(machine string) bool {
	for _, e := range due(a.st.leaseExpiry, a.now) {
		if a.st.leases[e.port].Machine == machine {
			return true
		}
	}
	return false
}
