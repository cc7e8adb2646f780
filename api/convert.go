package api

import (
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
)

// The API answers with wire types, converted here from the fsm records.
// The JSON of an fsm record is the snapshot format and may change with it;
// the HTTP format is wire's and changes only as a wire change.

func wireResource(r fsm.Resource) wire.Resource {
	return wire.Resource{
		ID: r.ID, Kind: r.Kind, Name: r.Name, Machine: r.Machine, Owner: r.Owner, Endpoint: r.Endpoint,
		Attrs: r.Attrs, ObservedAt: r.ObservedAt, TTLMs: r.TTLMs,
		RegisteredAt: r.RegisteredAt, RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt, Revision: r.Revision,
	}
}

func wireResources(rs []fsm.Resource) []wire.Resource { return convertAll(rs, wireResource) }

func wirePortLease(l fsm.PortLease) wire.PortLease {
	return wire.PortLease{
		ID: l.ID, Port: l.Port, LeaseID: l.LeaseID, Machine: l.Machine, Purpose: l.Purpose, Owner: l.Owner,
		TTLMs: l.TTLMs, GrantedAt: l.GrantedAt, RenewedAt: l.RenewedAt, ExpiresAt: l.ExpiresAt,
		Generation: l.Generation, Fence: l.Fence,
	}
}

func wirePortLeases(ls []fsm.PortLease) []wire.PortLease { return convertAll(ls, wirePortLease) }

// convertAll converts every element of xs with conv (empty, not nil, when xs
// is: the API answers [] rather than null).
func convertAll[T, W any](xs []T, conv func(T) W) []W {
	out := make([]W, 0, len(xs))
	for _, x := range xs {
		out = append(out, conv(x))
	}
	return out
}

func wireTokenInfo(t fsm.MemberToken) wire.TokenInfo {
	return wire.TokenInfo{Machine: t.Machine, IssuedAt: t.IssuedAt}
}
