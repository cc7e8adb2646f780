package fsm

// Precheck tells, from this replica's applied state, whether cmd would be
// refused: a heartbeat or delete of a resource that does not exist (or is
// not the caller's machine's), a renew or release of a lease that is not
// live, not the caller's or under another lease id, or a command whose
// machine token was revoked. It changes nothing.
//
// The leader calls it before proposing, so a call that would fail never
// becomes a log entry (a flood of heartbeats for random ids costs no disk
// write). It is advice: Apply still decides, and a command Precheck passes may
// be refused by Apply if the state changes in between. Commands it does not
// judge (register, acquire, token and cluster commands) pass.
func (f *FSM) Precheck(cmd Command, now int64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := applier{table: commandTable, st: f.st, now: max(now, f.st.lastNow)}
	if err := a.authorized(cmd); err != nil {
		return err
	}
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
	}
	return nil
}
