package check

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/elanous/elanous-node/wire"
)

// resState is the model's view of one resource id: whether it is registered
// and the two attrs the workload writes (register sets w and clears hb,
// heartbeat sets hb).
type resState struct {
	Exists bool
	W, HB  string
}

func (s resState) String() string {
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("w=%s hb=%s", s.W, s.HB)
}

type resOpKind int

const (
	rRegister resOpKind = iota
	rHeartbeat
	rDelete
	rReadRes
)

type resInput struct {
	ID    string
	Kind  resOpKind
	Value string
	Desc  string
}

type resOutput struct {
	Result leaseResult // rOK, rNotFound, rUnknown
	Seen   resState    // read: what was listed for the id
}

// ResourceModel is the sequential specification of one resource id: register
// upserts, heartbeat and delete need the record (404 otherwise), and a
// consistent read lists exactly the current record.
var ResourceModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(history, func(in any) string { return in.(resInput).ID })
	},
	Init: func() []any { return []any{resState{}} },
	Step: func(state, input, output any) []any {
		s := state.(resState)
		in := input.(resInput)
		out := output.(resOutput)
		var done resState
		switch in.Kind {
		case rRegister:
			done = resState{Exists: true, W: in.Value}
		case rHeartbeat:
			if !s.Exists {
				if out.Result == rNotFound || out.Result == rUnknown {
					return []any{s}
				}
				return nil
			}
			done = resState{Exists: true, W: s.W, HB: in.Value}
		case rDelete:
			if !s.Exists {
				if out.Result == rNotFound || out.Result == rUnknown {
					return []any{s}
				}
				return nil
			}
			done = resState{}
		case rReadRes:
			if out.Seen == s {
				return []any{s}
			}
			return nil
		}
		switch out.Result {
		case rOK:
			return []any{done}
		case rUnknown:
			return []any{done, s}
		}
		return nil // 404 while the record exists
	},
	DescribeOperation: func(input, output any) string {
		in := input.(resInput)
		out := output.(resOutput)
		return describe(in.Desc, out.Result, in.Kind == rReadRes, out.Seen.String())
	},
	DescribeState: func(state any) string { return state.(resState).String() },
}

// AttrString decodes a JSON string attr; anything else reads as its raw text.
func AttrString(raw json.RawMessage) string {
	if raw == nil {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw)
	}
	return s
}

func resStateOf(r wire.Resource) resState {
	return resState{Exists: true, W: AttrString(r.Attrs[AttrWrite]), HB: AttrString(r.Attrs[AttrHeartbeat])}
}

// resourceOperations turns recorded resource operations into porcupine
// operations, one per id; a consistent read becomes one read per known id.
func resourceOperations(h []Op) []porcupine.Operation {
	idSet := map[string]bool{}
	for _, o := range h {
		if o.ResID != "" && !strings.HasPrefix(o.ResID, RenewerIDPrefix) {
			idSet[o.ResID] = true
		}
		for _, r := range o.Resources {
			if !strings.HasPrefix(r.ID, RenewerIDPrefix) {
				idSet[r.ID] = true
			}
		}
	}
	ids := slices.Sorted(maps.Keys(idSet))

	var ops []porcupine.Operation
	add := func(o Op, in resInput, out resOutput) {
		ops = append(ops, operation(o, in, out, out.Result == rUnknown))
	}
	for _, o := range h {
		var k resOpKind
		var verb string
		switch o.Kind {
		case ResRegister:
			k, verb = rRegister, "register"
		case ResHeartbeat:
			k, verb = rHeartbeat, "heartbeat"
		case ResDelete:
			k, verb = rDelete, "delete"
		case ResRead:
			if o.Outcome != OK {
				continue
			}
			listed := map[string]resState{}
			for _, r := range o.Resources {
				listed[r.ID] = resStateOf(r)
			}
			for _, id := range ids {
				add(o, resInput{ID: id, Kind: rReadRes, Desc: fmt.Sprintf("c%d read", o.Client)},
					resOutput{Result: rOK, Seen: listed[id]})
			}
			continue
		default:
			continue
		}
		r := leaseResultOf(o)
		if r < 0 || r == rConflict {
			continue
		}
		add(o, resInput{ID: o.ResID, Kind: k, Value: o.Value, Desc: fmt.Sprintf("c%d %s %s", o.Client, verb, o.Value)},
			resOutput{Result: r})
	}
	return ops
}
