package api

import (
	"encoding/json"
	"testing"

	"github.com/elanous/elanous-node/fsm"
)

// TestConvert_WireBytes pins the JSON the API answers with for fsm records:
// the bytes clients saw when the API served fsm records directly (same
// fields, same order, same omissions). The fsm records' own JSON is the
// snapshot format and may change; this must not.
func TestConvert_WireBytes(t *testing.T) {
	resource := fsm.Resource{
		ID: "instance:host/1", Kind: "instance", Name: "host/1", Machine: "mbp", Owner: "0123456789abcdef",
		Endpoint: "http://10.0.0.7:31460", Attrs: map[string]json.RawMessage{"b": json.RawMessage(`[1,2]`), "a": json.RawMessage(`{"x":1}`)},
		ObservedAt: 1, TTLMs: 600000, RegisteredAt: 2, RenewedAt: 3, ExpiresAt: 600003, Revision: 4,
	}
	const resourceJSON = `{"id":"instance:host/1","kind":"instance","name":"host/1","machine":"mbp","owner":"0123456789abcdef",` +
		`"endpoint":"http://10.0.0.7:31460","attrs":{"a":{"x":1},"b":[1,2]},"observedAt":1,"ttlMs":600000,` +
		`"registeredAt":2,"renewedAt":3,"expiresAt":600003,"revision":4}`
	bare := fsm.Resource{ID: "machine:mbp", Kind: "machine", Name: "mbp", Machine: "mbp", TTLMs: 1}
	const bareJSON = `{"id":"machine:mbp","kind":"machine","name":"mbp","machine":"mbp","owner":"","attrs":null,` +
		`"observedAt":0,"ttlMs":1,"registeredAt":0,"renewedAt":0,"expiresAt":0,"revision":0}`
	lease := fsm.PortLease{
		ID: "port-lease:31450", Port: 31450, LeaseID: "5f0c0000-0000-0000-0000-000000000000", Machine: "mbp",
		Purpose: "dev", Owner: "0123456789abcdef", TTLMs: 600000, GrantedAt: 1, RenewedAt: 2, ExpiresAt: 600002,
		Generation: 3, Fence: 42, IdempotencyKey: "never on the wire",
	}
	const leaseJSON = `{"id":"port-lease:31450","port":31450,"leaseId":"5f0c0000-0000-0000-0000-000000000000",` +
		`"machine":"mbp","purpose":"dev","owner":"0123456789abcdef","ttlMs":600000,"grantedAt":1,"renewedAt":2,` +
		`"expiresAt":600002,"generation":3,"fence":42}`
	token := fsm.MemberToken{Machine: "mbp", SHA256: "never on the wire", IssuedAt: "2026-01-02T03:04:05Z"}
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"resource", wireResource(resource), resourceJSON},
		{"resource without endpoint or attrs", wireResource(bare), bareJSON},
		{"resources", wireResources([]fsm.Resource{resource, bare}), "[" + resourceJSON + "," + bareJSON + "]"},
		{"no resources", wireResources(nil), "[]"},
		{"port lease", wirePortLease(lease), leaseJSON},
		{"port leases", wirePortLeases([]fsm.PortLease{lease}), "[" + leaseJSON + "]"},
		{"no port leases", wirePortLeases(nil), "[]"},
		{"token info", wireTokenInfo(token), `{"machine":"mbp","issuedAt":"2026-01-02T03:04:05Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.got)
			if err != nil {
				t.Fatalf("json.Marshal(%T) error = %v", tt.got, err)
			}
			if string(got) != tt.want {
				t.Errorf("json.Marshal(%T) = %s\nwant %s", tt.got, got, tt.want)
			}
		})
	}
}
