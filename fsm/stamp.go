package fsm

// Stamp returns cmd with its time set to now (Unix ms). Only the leader calls
// it, just before proposing: it is the one place cluster time enters the log.
func Stamp(cmd Command, now int64) Command {
	switch c := cmd.(type) {
	case RegisterResource:
		c.Now = now
		return c
	case HeartbeatResource:
		c.Now = now
		return c
	case DeleteResource:
		c.Now = now
		return c
	case AcquireLease:
		c.Now = now
		return c
	case RenewLease:
		c.Now = now
		return c
	case ReleaseLease:
		c.Now = now
		return c
	case IssueToken:
		c.Now = now
		return c
	case RevokeToken:
		c.Now = now
		return c
	case ClaimPrimary:
		c.Now = now
		return c
	case Sweep:
		c.Now = now
		return c
	}
	return cmd
}
