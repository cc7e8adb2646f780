package check

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Tolerance absorbs the server's millisecond rounding of lease times.
const Tolerance = 5 * time.Millisecond

// holding is one lease as its holder believes it: from the moment the acquire
// returned until the TTL counted from the last successful renew's call (or
// the acquire's call) runs out, or the holder stops using it (release call,
// a renew answered 404/409).
type holding struct {
	client     int
	port       int
	leaseID    string
	start      int64
	validUntil int64
	end        int64
	ended      bool
}

// CheckLeaseIntervals reports every pair of leases on one port that two
// clients believed held at the same real instant, and every lease lost before
// the TTL its holder was granted had run out (a renew answered 404 or 409
// before renew-call + TTL). Both would let two members use one port.
func CheckLeaseIntervals(h []Op) []Violation {
	var out []Violation
	perClient := map[int][]Op{}
	for _, o := range h {
		switch o.Kind {
		case LeaseAcquire, LeaseRenew, LeaseRelease:
			perClient[o.Client] = append(perClient[o.Client], o)
		}
	}
	var all []*holding
	clients := slices.Sorted(maps.Keys(perClient))
	for _, c := range clients {
		ops := perClient[c]
		sortByCall(ops)
		held := map[string]*holding{}
		for _, o := range ops {
			ttl := o.TTLMs * int64(time.Millisecond)
			hd := held[o.LeaseID]
			switch o.Kind {
			case LeaseAcquire:
				if o.Outcome != OK {
					continue
				}
				if hd != nil {
					hd.validUntil = max(hd.validUntil, o.Call+ttl)
					continue
				}
				hd = &holding{client: c, port: o.Port, leaseID: o.LeaseID, start: o.Return, validUntil: o.Call + ttl}
				held[o.LeaseID] = hd
				all = append(all, hd)
			case LeaseRenew:
				if hd == nil || hd.ended {
					continue
				}
				switch {
				case o.Outcome == OK:
					hd.validUntil = max(hd.validUntil, o.Call+ttl)
				case o.Outcome == Failed && (o.Status == 404 || o.Status == 409):
					if o.Return < hd.validUntil-int64(Tolerance) {
						out = append(out, Violation{Kind: "lease-lost-early", Detail: fmt.Sprintf(
							"client %d: lease %s on port %d answered %d %s %.3fs before the TTL it was granted ran out",
							c, short(o.LeaseID), o.Port, o.Status, o.Code, float64(hd.validUntil-o.Return)/1e9)})
					}
					hd.end, hd.ended = min(hd.validUntil, o.Return), true
				}
			case LeaseRelease:
				if hd == nil || hd.ended {
					continue
				}
				hd.end, hd.ended = min(hd.validUntil, o.Call), true
			}
		}
	}
	perPort := map[int][]*holding{}
	for _, hd := range all {
		if !hd.ended {
			hd.end = hd.validUntil
		}
		if hd.end > hd.start {
			perPort[hd.port] = append(perPort[hd.port], hd)
		}
	}
	ports := slices.Sorted(maps.Keys(perPort))
	for _, p := range ports {
		hs := perPort[p]
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		for i := range hs {
			for j := i + 1; j < len(hs) && hs[j].start < hs[i].end-int64(Tolerance); j++ {
				if hs[j].leaseID == hs[i].leaseID {
					continue
				}
				out = append(out, Violation{Kind: "lease-overlap", Detail: fmt.Sprintf(
					"port %d: client %d held lease %s until +%.3fs while client %d got lease %s",
					p, hs[i].client, short(hs[i].leaseID), float64(hs[i].end-hs[j].start)/1e9, hs[j].client, short(hs[j].leaseID))})
			}
		}
	}
	return out
}

// CheckGenerations reports two holders answered as known for one generation
// (one leader per term), and a client that observed a generation lower than
// one it had observed before: through a grant or a consistent read (linearizable,
// so across all nodes), or through /v1/primary answering known (one node's own
// view, so per node and process incarnation).
func CheckGenerations(h []Op) []Violation {
	var out []Violation
	holders := map[uint64]string{}
	perClient := map[int][]Op{}
	for _, o := range h {
		if o.Kind == PrimaryPoll && o.Outcome == OK && o.Known && o.Holder != "" {
			if prev, ok := holders[o.Generation]; ok && prev != o.Holder {
				out = append(out, Violation{Kind: "two-primaries", Detail: fmt.Sprintf(
					"generation %d known with holder %s and with holder %s (%s)", o.Generation, prev, o.Holder, o)})
				holders[o.Generation] = o.Holder
			} else if !ok {
				holders[o.Generation] = o.Holder
			}
		}
		if o.Outcome == OK && o.Generation > 0 {
			perClient[o.Client] = append(perClient[o.Client], o)
		}
	}
	clients := slices.Sorted(maps.Keys(perClient))
	for _, c := range clients {
		ops := perClient[c]
		sortByCall(ops)
		var linMax uint64
		var linFrom Op
		perNode := map[string]uint64{}
		for _, o := range ops {
			switch o.Kind {
			case PrimaryPoll:
				if !o.Known {
					continue
				}
				k := fmt.Sprintf("%s#%d", o.Node, o.Epoch)
				if o.Generation < perNode[k] {
					out = append(out, Violation{Kind: "generation-regressed", Detail: fmt.Sprintf(
						"client %d: /v1/primary on %s said generation %d after %d", c, o.Node, o.Generation, perNode[k])})
				}
				perNode[k] = max(perNode[k], o.Generation)
			case LeaseAcquire, LeaseRead, ResRead:
				if o.Generation < linMax {
					out = append(out, Violation{Kind: "generation-regressed", Detail: fmt.Sprintf(
						"client %d: %s said generation %d after %s said %d", c, o, o.Generation, linFrom, linMax)})
				}
				if o.Generation > linMax {
					linMax, linFrom = o.Generation, o
				}
			}
		}
	}
	return out
}
