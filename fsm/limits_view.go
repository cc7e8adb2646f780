package fsm

// ConfiguredLimits returns the abuse limits as the last SetLimits set them:
// a zero field takes its default (Limits returns them with the defaults
// filled in). Read-only.
func (f *FSM) ConfiguredLimits() Limits {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.limits
}

// LeasesPerMachineIn returns the port leases one machine may hold when it
// acquires from the band [start, end]: LeasesPerMachine when set, else a
// quarter of the band (at least one), as Apply decides.
func (l Limits) LeasesPerMachineIn(start, end int) int {
	return l.leasesPerMachine(start, end)
}

// Batchable reports whether a command of type t may be part of a Batch
// (NewBatch refuses the others: claims, sweeps, format and directory
// changes, limits). A proposer that groups commands sends the others alone.
func Batchable(t CommandType) bool { return batchable(commandTable, t) == nil }
