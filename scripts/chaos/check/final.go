package check

import (
	"fmt"
	"maps"
	"slices"

	"github.com/elanous/elanous-node/wire"
)

// CheckFinal compares the state read after healing with the acknowledged
// writes of h. Every long lease granted and never released (nor released in
// doubt, nor lost) must still be listed with its lease id; for every resource
// id whose last acknowledged write overlaps no other write, the record must
// be what that write left.
func CheckFinal(h []Op, leases []wire.PortLease, resources []wire.Resource) []Violation {
	var out []Violation
	byPort := map[int]wire.PortLease{}
	for _, l := range leases {
		byPort[l.Port] = l
	}
	granted := map[string]Op{}
	gone := map[string]bool{}
	for _, o := range h {
		switch o.Kind {
		case LeaseAcquire:
			if o.Outcome == OK && !o.Short {
				granted[o.LeaseID] = o
			}
		case LeaseRelease:
			gone[o.LeaseID] = true
		case LeaseRenew:
			if o.Outcome == Failed && (o.Status == 404 || o.Status == 409) {
				gone[o.LeaseID] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(granted)) {
		if gone[id] {
			continue
		}
		g := granted[id]
		if l, ok := byPort[g.Port]; !ok || l.LeaseID != id {
			out = append(out, Violation{Kind: "acknowledged-write-lost", Detail: fmt.Sprintf(
				"lease %s on port %d granted to client %d is not in the final state (port shows %q)", short(id), g.Port, g.Client, l.LeaseID)})
		}
	}

	final := map[string]resState{}
	for _, r := range resources {
		final[r.ID] = resStateOf(r)
	}
	writes := map[string][]Op{}
	for _, o := range h {
		switch o.Kind {
		case ResRegister, ResHeartbeat, ResDelete:
			if o.Outcome == Failed && o.Status != 404 {
				continue // refused before it was proposed
			}
			writes[o.ResID] = append(writes[o.ResID], o)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(writes)) {
		ws := writes[id]
		last := -1
		for i, o := range ws {
			if o.Outcome == OK && (last < 0 || o.Return > ws[last].Return) {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		w := ws[last]
		alone := true
		for i, o := range ws {
			if i == last {
				continue
			}
			if o.Outcome == Indeterminate || o.Return >= w.Call {
				alone = false
				break
			}
		}
		if !alone {
			continue
		}
		got := final[id]
		var want resState
		switch w.Kind {
		case ResRegister:
			want = resState{Exists: true, W: w.Value}
		case ResHeartbeat:
			if !got.Exists || got.HB != w.Value {
				out = append(out, Violation{Kind: "acknowledged-write-lost", Detail: fmt.Sprintf(
					"resource %s: last write %s, final state %s", id, w, got)})
			}
			continue
		case ResDelete:
			want = resState{}
		}
		if got != want {
			out = append(out, Violation{Kind: "acknowledged-write-lost", Detail: fmt.Sprintf(
				"resource %s: last write %s, final state %s, want %s", id, w, got, want)})
		}
	}
	return out
}
