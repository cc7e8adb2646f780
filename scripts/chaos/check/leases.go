package check

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/elanous/elanous-node/wire"
)

// leaseState is the model's view of one port: the lease id holding it ("" when
// free) and whether that lease is short (may expire at any moment, since the
// model has no clock).
type leaseState struct {
	LeaseID string
	Short   bool
}

type leaseOpKind int

const (
	lAcquire leaseOpKind = iota
	lRenew
	lRelease
	lRead
)

// leaseInput is one operation on one port.
type leaseInput struct {
	Port    int
	Kind    leaseOpKind
	LeaseID string // granted (acquire), presented (renew, release)
	Short   bool
	Desc    string
}

// leaseResult classifies an answer.
type leaseResult int

const (
	rOK       leaseResult = iota // 200/201/204
	rNotFound                    // 404: no lease on the port
	rConflict                    // 409: the port is held under another lease id
	rUnknown                     // indeterminate
)

type leaseOutput struct {
	Result  leaseResult
	LeaseID string // read: the lease id listed for the port, "" when none
}

// LeaseModel is the sequential specification of one port of the lease table.
// Acquire grants a free port (or replays the grant it made, same lease id,
// under an Idempotency-Key); renew answers 200 only to the holder, 404 when
// free, 409 to anyone else; release frees the port for its holder; a
// consistent read lists exactly the holder. A short lease may expire between
// any two operations.
var LeaseModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(history, func(in any) string { return fmt.Sprint(in.(leaseInput).Port) })
	},
	Init: func() []any { return []any{leaseState{}} },
	Step: func(state, input, output any) []any {
		s := state.(leaseState)
		in := input.(leaseInput)
		out := output.(leaseOutput)
		starts := []leaseState{s}
		if s.LeaseID != "" && s.Short {
			starts = append(starts, leaseState{}) // it may have expired
		}
		var next []any
		for _, st := range starts {
			next = append(next, leaseStep(st, in, out)...)
		}
		return next
	},
	DescribeOperation: func(input, output any) string {
		in := input.(leaseInput)
		out := output.(leaseOutput)
		return describe(in.Desc, out.Result, in.Kind == lRead, orNone(out.LeaseID))
	},
	DescribeState: func(state any) string {
		s := state.(leaseState)
		if s.LeaseID == "" {
			return "free"
		}
		if s.Short {
			return "held by " + short(s.LeaseID) + " (short)"
		}
		return "held by " + short(s.LeaseID)
	},
}

// describe shows an operation, desc, that came out r; seen is what a read
// that came out OK returned.
func describe(desc string, r leaseResult, read bool, seen string) string {
	switch r {
	case rOK:
		if read {
			return desc + " -> " + seen
		}
		return desc + " -> ok"
	case rNotFound:
		return desc + " -> 404"
	case rConflict:
		return desc + " -> 409"
	}
	return desc + " -> ?"
}

func orNone(id string) string {
	if id == "" {
		return "none"
	}
	return short(id)
}

func leaseStep(s leaseState, in leaseInput, out leaseOutput) []any {
	held := leaseState{LeaseID: in.LeaseID, Short: in.Short}
	switch in.Kind {
	case lAcquire:
		switch out.Result {
		case rOK:
			if s.LeaseID == "" {
				return []any{held}
			}
			if s.LeaseID == in.LeaseID { // idempotent replay of this grant
				return []any{s}
			}
			return nil
		case rUnknown:
			if s.LeaseID == "" {
				return []any{held, s}
			}
			return []any{s}
		}
		return nil // refused acquires never reach the model
	case lRenew, lRelease:
		return holderStep(s, in, out)
	case lRead:
		if out.LeaseID == s.LeaseID {
			return []any{s}
		}
		return nil
	}
	return nil
}

// holderStep steps a renew or a release, presented under in.LeaseID: it
// succeeds only for the holder (a release then frees the port), answers 404
// when the port is free and 409 when another lease holds it; a release of
// unknown outcome may have freed the port.
func holderStep(s leaseState, in leaseInput, out leaseOutput) []any {
	after := s
	if in.Kind == lRelease {
		after = leaseState{}
	}
	holder := s.LeaseID == in.LeaseID
	switch out.Result {
	case rOK:
		if holder {
			return []any{after}
		}
	case rNotFound:
		if s.LeaseID == "" {
			return []any{s}
		}
	case rConflict:
		if s.LeaseID != "" && !holder {
			return []any{s}
		}
	case rUnknown:
		if holder && in.Kind == lRelease {
			return []any{after, s}
		}
		return []any{s}
	}
	return nil
}

func leaseResultOf(o Op) leaseResult {
	switch o.Outcome {
	case OK:
		return rOK
	case Indeterminate:
		return rUnknown
	}
	switch o.Status {
	case 404:
		return rNotFound
	case 409:
		return rConflict
	}
	return -1
}

// leaseOperations turns recorded lease operations into porcupine operations,
// one per port touched. A consistent read becomes one read per known port. An
// indeterminate acquire takes the port and lease id a later read shows for its
// purpose; one no read ever showed is left out: nothing observed it, so
// leaving it out cannot hide a violation.
func leaseOperations(h []Op) []porcupine.Operation {
	type grant struct {
		port int
		id   string
	}
	ports := map[int]bool{}
	explained := map[string]bool{}    // lease ids an ok acquire returned
	byPurpose := map[string][]grant{} // every lease seen per purpose, first seen first
	seen := map[string]bool{}
	see := func(purpose string, g grant) {
		if purpose == "" || g.id == "" || seen[g.id] {
			return
		}
		seen[g.id] = true
		byPurpose[purpose] = append(byPurpose[purpose], g)
	}
	for _, o := range h {
		switch o.Kind {
		case LeaseAcquire:
			if o.Outcome == OK {
				ports[o.Port] = true
				explained[o.LeaseID] = true
				see(o.Purpose, grant{o.Port, o.LeaseID})
			}
		case LeaseRead:
			if o.Outcome == OK {
				for _, l := range o.Leases {
					ports[l.Port] = true
					see(l.Purpose, grant{l.Port, l.LeaseID})
				}
			}
		}
	}
	// An indeterminate acquire is the grant of its purpose that no ok acquire
	// returned (a late application after its retry), else the one its retry
	// returned (the retry replayed it), else nothing that was ever observed.
	used := map[string]bool{}
	resolve := func(purpose string) (grant, bool) {
		for _, g := range byPurpose[purpose] {
			if !explained[g.id] && !used[g.id] {
				used[g.id] = true
				return g, true
			}
		}
		for _, g := range byPurpose[purpose] {
			if explained[g.id] {
				return g, true
			}
		}
		return grant{}, false
	}
	sorted := slices.Sorted(maps.Keys(ports))

	var ops []porcupine.Operation
	add := func(o Op, in leaseInput, out leaseOutput) {
		ops = append(ops, operation(o, in, out, out.Result == rUnknown))
	}
	for _, o := range h {
		switch o.Kind {
		case LeaseAcquire:
			switch o.Outcome {
			case OK:
				add(o, leaseInput{Port: o.Port, Kind: lAcquire, LeaseID: o.LeaseID, Short: o.Short,
					Desc: fmt.Sprintf("c%d acquire %s", o.Client, short(o.LeaseID))}, leaseOutput{Result: rOK})
			case Indeterminate:
				if g, ok := resolve(o.Purpose); ok {
					add(o, leaseInput{Port: g.port, Kind: lAcquire, LeaseID: g.id, Short: o.Short,
						Desc: fmt.Sprintf("c%d acquire? %s", o.Client, short(g.id))}, leaseOutput{Result: rUnknown})
				}
			}
		case LeaseRenew, LeaseRelease:
			r := leaseResultOf(o)
			if r < 0 {
				continue // 400/403, 503 no-leader and the like: nothing happened
			}
			if r == rUnknown && o.Kind == LeaseRenew {
				continue // an unknown renew changes nothing the model sees
			}
			k, verb := lRenew, "renew"
			if o.Kind == LeaseRelease {
				k, verb = lRelease, "release"
			}
			add(o, leaseInput{Port: o.Port, Kind: k, LeaseID: o.LeaseID,
				Desc: fmt.Sprintf("c%d %s %s", o.Client, verb, short(o.LeaseID))}, leaseOutput{Result: r})
		case LeaseRead:
			if o.Outcome != OK {
				continue
			}
			listed := map[int]string{}
			for _, l := range o.Leases {
				listed[l.Port] = l.LeaseID
			}
			for _, p := range sorted {
				add(o, leaseInput{Port: p, Kind: lRead, Desc: fmt.Sprintf("c%d read", o.Client)},
					leaseOutput{Result: rOK, LeaseID: listed[p]})
			}
		}
	}
	return ops
}

// operation is o as a porcupine operation with input in and output out; one
// whose outcome is unknown never returns (Return is Infinity).
func operation(o Op, in, out any, unknown bool) porcupine.Operation {
	ret := o.Return
	if unknown {
		ret = Infinity
	}
	return porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: out, Return: ret, Metadata: o.String()}
}

func partitionBy(history []porcupine.Operation, key func(any) string) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := key(op.Input)
		i, ok := idx[k]
		if !ok {
			i = len(parts)
			idx[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// CheckIdempotency reports a purpose (unique per acquire and its retries, all
// sent with one Idempotency-Key) that ended up with two different leases
// while the first could not yet have expired: one request was applied twice,
// and the second grant is an orphan nobody knows to renew or release. When
// the first lease had been released by its holder, the acquire rule (the lowest free port) allows the new
// grant ("returns the live lease it created"): that case is a note, not a
// violation.
func CheckIdempotency(h []Op) (violations []Violation, notes []string) {
	type rec struct {
		id                  string
		granted, maxExpires int64
		short               bool
	}
	byPurpose := map[string][]*rec{}
	byID := map[string]*rec{}
	note := func(purpose string, l wire.PortLease, short bool) {
		if purpose == "" || l.LeaseID == "" {
			return
		}
		r := byID[l.LeaseID]
		if r == nil {
			r = &rec{id: l.LeaseID, granted: l.GrantedAt, short: short}
			byID[l.LeaseID] = r
			byPurpose[purpose] = append(byPurpose[purpose], r)
		}
		r.maxExpires = max(r.maxExpires, l.ExpiresAt)
		if r.granted == 0 {
			r.granted = l.GrantedAt
		}
	}
	released := map[string]bool{}
	for _, o := range h {
		if o.Kind == LeaseRelease && o.Outcome == OK {
			released[o.LeaseID] = true
		}
	}
	for _, o := range h {
		switch {
		case o.Kind == LeaseAcquire && o.Outcome == OK:
			l := wire.PortLease{LeaseID: o.LeaseID}
			if len(o.Leases) == 1 {
				l = o.Leases[0]
			}
			note(o.Purpose, l, o.Short)
		case o.Kind == LeaseRead && o.Outcome == OK:
			for _, l := range o.Leases {
				note(l.Purpose, l, strings.HasSuffix(l.Purpose, "-short"))
			}
		}
	}
	purposes := slices.Sorted(maps.Keys(byPurpose))
	for _, p := range purposes {
		rs := byPurpose[p]
		if len(rs) < 2 {
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].granted < rs[j].granted })
		a, b := rs[0], rs[1]
		// The cluster remembers a key for 10 minutes of cluster time after its
		// grant, released, expired or live (fsm.IdempotencyRetentionMs), and a
		// scenario is far shorter: any second grant under one key is a
		// violation, a late duplicate of an answered request included.
		detail := fmt.Sprintf("Idempotency-Key %q granted %d leases: %s (granted %d, released %v) and then %s (granted %d)",
			p, len(rs), short(a.id), a.granted, released[a.id], short(b.id), b.granted)
		violations = append(violations, Violation{Kind: "idempotency-broken", Detail: detail})
	}
	return violations, notes
}
