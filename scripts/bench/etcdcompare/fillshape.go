package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/elanous/elanous-node/wire"
)

// Fill shapes (--fill-shape): what the N records of a fill look like.
const (
	// shapeInstance is ten instance records per machine, no attrs.
	shapeInstance = "instance"
	// shapeMachine is one machine record per machine with the attrs a seed
	// member publishes (its duties and its load, about 150 bytes), and an
	// open loop whose every heartbeat publishes a new load, as a seed's does.
	shapeMachine = "machine"
)

// fillShape names and encodes the records of a fill.
type fillShape string

func (f fillShape) valid() bool { return f == shapeInstance || f == shapeMachine }

// id and machine name fill record i.
func (f fillShape) id(i int) string {
	if f == shapeMachine {
		return "machine:" + f.machine(i)
	}
	return fmt.Sprintf("instance:%s/%d", f.machine(i), i%10)
}

func (f fillShape) machine(i int) string {
	if f == shapeMachine {
		return "fill-" + strconv.Itoa(i)
	}
	return fmt.Sprintf("fill-%d", i/10)
}

// register is the register request of fill record i; etcd's fill puts the
// same bytes as its value.
func (f fillShape) register(i int) []byte {
	if f != shapeMachine {
		return registerBody(f.id(i), f.machine(i), fillTTLMs)
	}
	m := f.machine(i)
	b, err := json.Marshal(wire.RegisterRequest{ID: f.id(i), Kind: "machine", Name: m, Machine: m, TTLMs: fillTTLMs,
		Attrs: map[string]json.RawMessage{"duties": json.RawMessage(`["build"]`), "load": seedLoad(i, 0)}})
	if err != nil {
		panic(err) // a fixed struct of strings, ints and valid JSON always encodes
	}
	return b
}

// heartbeat is the body of heartbeat k on fill record i: {} for instances,
// a new load for machines.
func (f fillShape) heartbeat(i, k int) []byte {
	if f != shapeMachine {
		return []byte("{}")
	}
	return []byte(`{"attrs":{"load":` + string(seedLoad(i, k)) + `}}`)
}

// seedLoad is a member's load attribute (member.Load's fields) for beat k
// of record i: about 130 bytes, different on every beat.
func seedLoad(i, k int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"loadAvg":[%d.%02d,0.61,0.7],"cpuCount":8,"freeMem":%d,"totalMem":17179869184,"observedAt":%d}`,
		k%8, i%100, 8_000_000_000+int64(k%1000)*1_000_003, 1_700_000_000_000+int64(k)*30_000))
}
