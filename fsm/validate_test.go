package fsm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

func TestValidateAttrs(t *testing.T) {
	tests := []struct {
		name    string
		attrs   map[string]json.RawMessage
		wantErr bool
	}{
		{name: "nil", attrs: nil},
		{name: "empty", attrs: map[string]json.RawMessage{}},
		{name: "values of every kind", attrs: attrs(`{"n":1,"s":"x","a":[1],"o":{"k":null},"b":true}`)},
		{name: "exactly 16 KiB", attrs: bigAttrs("k", wire.MaxAttrsBytes)},
		{name: "16 KiB plus one", attrs: bigAttrs("k", wire.MaxAttrsBytes+1), wantErr: true},
		{name: "16 KiB of HTML characters", attrs: map[string]json.RawMessage{
			"k": json.RawMessage(`"` + strings.Repeat("<", wire.MaxAttrsBytes-len(`{"k":""}`)) + `"`)}},
		{name: "white space in a request is not counted", attrs: map[string]json.RawMessage{
			"k": json.RawMessage("[" + strings.Repeat(" ", wire.MaxAttrsBytes) + "1]")}},
		{name: "many small keys over 16 KiB", attrs: func() map[string]json.RawMessage {
			m := map[string]json.RawMessage{}
			for i := range 2000 {
				m[strings.Repeat("k", 1+i%7)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))] = json.RawMessage("1")
			}
			return m
		}(), wantErr: true},
		{name: "invalid JSON value", attrs: map[string]json.RawMessage{"a": json.RawMessage("{")}, wantErr: true},
		{name: "empty value", attrs: map[string]json.RawMessage{"a": nil}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateAttrs(tt.attrs)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrInvalidCommand)) {
				t.Errorf("ValidateAttrs() = %v, want error %v wrapping %v", err, tt.wantErr, ErrInvalidCommand)
			}
		})
	}
}

// Two invalid values: every replica must name the same one.
func TestValidateAttrs_DeterministicError(t *testing.T) {
	m := map[string]json.RawMessage{}
	for _, k := range []string{"q", "b", "z", "a", "m", "x"} {
		m[k] = json.RawMessage("{")
	}
	want := ValidateAttrs(m).Error()
	for range 50 {
		if got := ValidateAttrs(m).Error(); got != want {
			t.Fatalf("ValidateAttrs() = %q, then %q", want, got)
		}
	}
	if !strings.Contains(want, "attrs.a ") {
		t.Errorf("ValidateAttrs() = %q, want it to name attrs.a (the first key)", want)
	}
}
