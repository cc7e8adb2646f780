package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

func TestFillShape_Machine(t *testing.T) {
	f := fillShape(shapeMachine)
	var req wire.RegisterRequest
	if err := json.Unmarshal(f.register(7), &req); err != nil {
		t.Fatalf("register(7) does not decode: %v", err)
	}
	if req.ID != "machine:fill-7" || req.Kind != "machine" || req.Machine != "fill-7" {
		t.Errorf("register(7) = id %q kind %q machine %q, want machine:fill-7, machine, fill-7", req.ID, req.Kind, req.Machine)
	}
	if err := wire.CheckAttrs(req.Attrs); err != nil {
		t.Fatalf("register(7) attrs: %v", err)
	}
	size := 0
	for k, v := range req.Attrs {
		size += len(k) + len(v)
	}
	if size < 130 || size > 170 {
		t.Errorf("register(7) attrs are %d bytes, want about 150 (a seed's machine)", size)
	}
	var hb struct {
		Attrs map[string]json.RawMessage `json:"attrs"`
	}
	a, b := f.heartbeat(7, 1), f.heartbeat(7, 2)
	if err := json.Unmarshal(a, &hb); err != nil || !json.Valid(hb.Attrs["load"]) {
		t.Fatalf("heartbeat(7, 1) = %s, want a load attr (err %v)", a, err)
	}
	if bytes.Equal(a, b) {
		t.Errorf("heartbeat(7, 1) = heartbeat(7, 2) = %s, want a new load on every beat", a)
	}
}

func TestFillShape_Instance(t *testing.T) {
	f := fillShape(shapeInstance)
	if got := f.id(23); got != "instance:fill-2/3" {
		t.Errorf("id(23) = %q, want instance:fill-2/3 (ten instances a machine)", got)
	}
	if got := string(f.heartbeat(23, 5)); got != "{}" {
		t.Errorf("heartbeat(23, 5) = %s, want {}", got)
	}
}
