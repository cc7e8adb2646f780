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
	return keepOwned(ls, w.owner(), func(l wire.PortLease) string { return l.Owner })
}

// ownResources keeps the resources the workload's clients registered (see
// ownLeases).
func (w *Workload) ownResources(rs []wire.Resource) []wire.Resource {
	return keepOwned(rs, w.owner(), func(r wire.Resource) string { return r.Owner })
}

// keepOwned keeps, in place, the xs whose owner is owner.
func keepOwned[T any](xs []T, owner string, ownerOf func(T) string) []T {
	out := xs[:0]
	for _, x := range xs {
		if ownerOf(x) == owner {
			out = append(out, x)
		}
	}
	return out
}
