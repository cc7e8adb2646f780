package workload

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/elanous/elanous-node/wire"
)

// owner is the fingerprint the cluster stamps on the workload's records:
// its writes all carry the cluster member token.
func (w *Workload) owner() string {
	sum := sha256.Sum256([]byte(w.cfg.Tokens.Member))
	return hex.EncodeToString(sum[:8])
}

// ownLeases keeps the leases the workload's clients hold. Other clients of
// the cluster (the abuse scenario's members and abusers, under machine
// tokens of their own) hold leases the models know nothing of; a port they
// hold is never granted to the workload meanwhile, so to the models it is
// simply not there.
func (w *Workload) ownLeases(ls []wire.PortLease) []wire.PortLease {
	owner, out := w.owner(), ls[:0]
	for _, l := range ls {
		if l.Owner == owner {
			out = append(out, l)
		}
	}
	return out
}

// ownResources keeps the resources the workload's clients registered (see
// ownLeases).
func (w *Workload) ownResources(rs []wire.Resource) []wire.Resource {
	owner, out := w.owner(), rs[:0]
	for _, r := range rs {
		if r.Owner == owner {
			out = append(out, r)
		}
	}
	return out
}
