package fsm

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

// The baseline (see harness.baseline) holds, at t0 and term 3: the claim of
// node-a (index 1), resource machine:base (index 2), the lease on 31450 under
// "lease-base" owned by memberCaller with key "idem-base" (index 3) and the
// token of machine "base" (index 4). Error cases are stamped t0 so that the
// whole Hash must stay the same.

func TestFSM_ApplyRegisterResource(t *testing.T) {
	invalid := func(name string, mutate func(*RegisterResource)) applyCase {
		return invalidCase(name, registerCmd(t0, memberCaller, "machine:mbp", "mbp"), mutate, ErrInvalidCommand)
	}
	cases := []applyCase{
		{
			name: "new record",
			cmd:  constant(registerCmd(t0+10, memberCaller, "machine:mbp", "mbp")),
			check: func(t *testing.T, h *harness, res interface{}) {
				want := Resource{
					ID: "machine:mbp", Kind: "machine", Name: "mbp", Machine: "mbp", Owner: memberCaller.Owner,
					Attrs: attrs(`{"load":0.5}`), ObservedAt: t0 + 10, TTLMs: ttl,
					RegisteredAt: t0 + 10, RenewedAt: t0 + 10, ExpiresAt: t0 + 10 + ttl, Revision: h.index,
				}
				if !reflect.DeepEqual(res, want) {
					t.Errorf("Apply() = %+v, want %+v", res, want)
				}
				if got, ok := h.f.Resource("machine:mbp"); !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("Resource() = %+v, %v, want %+v, true", got, ok, want)
				}
				if got := h.f.Index(TableResources); got != h.index {
					t.Errorf("Index(TableResources) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name:  "upsert while live keeps registeredAt and replaces the rest",
			setup: func(h *harness) { h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp")) },
			cmd: func(*harness) Command {
				c := registerCmd(t0+1000, otherCaller, "machine:mbp", "mbp")
				c.Name, c.Attrs, c.Endpoint = "mbp-2", attrs(`{"seats":2}`), "http://10.0.0.9:1"
				return c
			},
			check: func(t *testing.T, h *harness, res interface{}) {
				r := res.(Resource)
				if r.RegisteredAt != t0 || r.RenewedAt != t0+1000 || r.ExpiresAt != t0+1000+ttl || r.Revision != h.index {
					t.Errorf("Apply() times = registered %d renewed %d expires %d revision %d, want %d %d %d %d",
						r.RegisteredAt, r.RenewedAt, r.ExpiresAt, r.Revision, t0, t0+1000, t0+1000+ttl, h.index)
				}
				if !reflect.DeepEqual(r.Attrs, attrs(`{"seats":2}`)) {
					t.Errorf("Apply().Attrs = %s, want replaced by {\"seats\":2}", jsonOf(r.Attrs))
				}
				if r.Name != "mbp-2" || r.Owner != otherCaller.Owner || r.Endpoint != "http://10.0.0.9:1" {
					t.Errorf("Apply() = %+v, want the new name, owner and endpoint", r)
				}
			},
		},
		{
			name: "upsert after expiry starts a new registration",
			setup: func(h *harness) {
				registerMbp(h, 1000)
			},
			cmd: constant(registerCmd(t0+1000, memberCaller, "machine:mbp", "mbp")),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(Resource).RegisteredAt; got != t0+1000 {
					t.Errorf("Apply().RegisteredAt = %d, want %d", got, t0+1000)
				}
			},
		},
		{
			name: "machine token registers its own machine",
			cmd:  constant(registerCmd(t0, mbpCaller, "machine:mbp", "mbp")),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(Resource).Owner; got != mbpCaller.Owner {
					t.Errorf("Apply().Owner = %q, want %q", got, mbpCaller.Owner)
				}
			},
		},
		{
			name: "instance with endpoint and percent-worthy id",
			cmd: func(*harness) Command {
				c := registerCmd(t0, memberCaller, "instance:host/1", "mbp")
				c.Kind, c.Endpoint = "instance", "http://127.0.0.1:31451"
				return c
			},
			check: func(t *testing.T, h *harness, res interface{}) {
				if got, ok := h.f.Resource("instance:host/1"); !ok || got.Endpoint != "http://127.0.0.1:31451" {
					t.Errorf("Resource() = %+v, %v, want the instance", got, ok)
				}
				if got := len(h.f.Resources("instance", "")); got != 1 {
					t.Errorf("len(Resources(instance)) = %d, want 1", got)
				}
			},
		},
		{
			name: "ttl of exactly 24h",
			cmd: func(*harness) Command {
				c := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
				c.TTLMs = wire.MaxResourceTTLMs
				return c
			},
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(Resource).ExpiresAt; got != t0+wire.MaxResourceTTLMs {
					t.Errorf("Apply().ExpiresAt = %d, want %d", got, t0+wire.MaxResourceTTLMs)
				}
			},
		},
		{
			name: "attrs of exactly 16 KiB",
			cmd: func(*harness) Command {
				c := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
				c.Attrs = bigAttrs("blob", wire.MaxAttrsBytes)
				return c
			},
		},
		{
			name:    "machine token for another machine",
			cmd:     constant(registerCmd(t0, mbpCaller, "machine:studio", "studio")),
			wantErr: []error{ErrForbidden},
		},
		{
			name:    "machine token over another machine's live record",
			setup:   func(h *harness) { h.mustApply(registerCmd(t0, memberCaller, "instance:shared", "studio")) },
			cmd:     constant(registerCmd(t0, mbpCaller, "instance:shared", "mbp")),
			wantErr: []error{ErrForbidden},
		},
		invalid("machine __proto__", func(c *RegisterResource) { c.Machine = "__proto__" }),
		invalid("machine constructor", func(c *RegisterResource) { c.Machine = "constructor" }),
		invalid("machine prototype", func(c *RegisterResource) { c.Machine = "prototype" }),
		invalid("machine empty", func(c *RegisterResource) { c.Machine = "" }),
		invalid("machine 300 chars", func(c *RegisterResource) { c.Machine = strings.Repeat("m", 300) }),
		invalid("machine 254 chars", func(c *RegisterResource) { c.Machine = strings.Repeat("m", 254) }),
		invalid("machine non-ASCII", func(c *RegisterResource) { c.Machine = "mäschine" }),
		invalid("machine leading dash", func(c *RegisterResource) { c.Machine = "-mbp" }),
		invalid("machine with space", func(c *RegisterResource) { c.Machine = "mb p" }),
		invalid("id empty", func(c *RegisterResource) { c.ID = "" }),
		invalid("id with control char", func(c *RegisterResource) { c.ID = "machine:\x01mbp" }),
		invalid("id with newline", func(c *RegisterResource) { c.ID = "machine:mbp\n" }),
		invalid("id with DEL", func(c *RegisterResource) { c.ID = "machine:mbp\x7f" }),
		invalid("id over 512 bytes", func(c *RegisterResource) { c.ID = strings.Repeat("i", wire.MaxIDLen+1) }),
		invalid("kind upper case", func(c *RegisterResource) { c.Kind = "Machine" }),
		invalid("kind empty", func(c *RegisterResource) { c.Kind = "" }),
		invalid("name empty", func(c *RegisterResource) { c.Name = "" }),
		invalid("endpoint with newline", func(c *RegisterResource) { c.Endpoint = "http://x\n" }),
		invalid("ttlMs 0", func(c *RegisterResource) { c.TTLMs = 0 }),
		invalid("ttlMs negative", func(c *RegisterResource) { c.TTLMs = -1 }),
		invalid("ttlMs over 24h", func(c *RegisterResource) { c.TTLMs = wire.MaxResourceTTLMs + 1 }),
		invalid("observedAt negative", func(c *RegisterResource) { c.ObservedAt = -1 }),
		invalid("attrs over 16 KiB", func(c *RegisterResource) { c.Attrs = bigAttrs("blob", wire.MaxAttrsBytes+1) }),
		invalid("invalid and over 16 KiB, stamped later", func(c *RegisterResource) {
			c.Attrs = bigAttrs("blob", 2*wire.MaxAttrsBytes)
			c.Now = t0 + 5000 // lastNow moves, the tables do not
		}),
	}
	runApplyCases(t, cases)
}

// resourceRefusals are the refusals every command on one resource shares,
// cmd being the command at t0 by caller c on id: an unknown id, a machine
// token of another machine, an empty id.
func resourceRefusals(cmd func(c Caller, id string) Command) []applyCase {
	return []applyCase{
		{name: "unknown id", cmd: constant(cmd(memberCaller, "machine:nope")), wantErr: []error{ErrNotFound}},
		{
			name:    "machine token of another machine",
			setup:   func(h *harness) { h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp")) },
			cmd:     constant(cmd(studioCaller, "machine:mbp")),
			wantErr: []error{ErrForbidden},
		},
		{name: "empty id", cmd: constant(cmd(memberCaller, "")), wantErr: []error{ErrInvalidCommand}},
	}
}

func TestFSM_ApplyHeartbeatResource(t *testing.T) {
	registered := func(h *harness) {
		c := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
		c.Attrs = attrs(`{"load":0.5,"duties":["a"]}`)
		h.mustApply(c)
	}
	short := func(h *harness) {
		registerMbp(h, 1000)
	}
	cases := []applyCase{
		{
			name:  "merges attrs key by key and renews",
			setup: registered,
			cmd: constant(HeartbeatResource{Header: Header{Now: t0 + 1000}, Caller: memberCaller, ID: "machine:mbp",
				Attrs: attrs(`{"load":0.9,"seats":2}`)}),
			check: func(t *testing.T, h *harness, res interface{}) {
				r := res.(Resource)
				if want := attrs(`{"duties":["a"],"load":0.9,"seats":2}`); !reflect.DeepEqual(r.Attrs, want) {
					t.Errorf("Apply().Attrs = %s, want %s", jsonOf(r.Attrs), jsonOf(want))
				}
				if r.ExpiresAt != t0+1000+ttl || r.RenewedAt != t0+1000 || r.RegisteredAt != t0 || r.Revision != h.index {
					t.Errorf("Apply() = %+v, want expiresAt %d renewedAt %d registeredAt %d revision %d",
						r, t0+1000+ttl, t0+1000, t0, h.index)
				}
				if got, _ := h.f.Resource("machine:mbp"); !reflect.DeepEqual(got, r) {
					t.Errorf("Resource() = %+v, want %+v", got, r)
				}
			},
		},
		{
			name:  "without attrs keeps them",
			setup: registered,
			cmd:   constant(HeartbeatResource{Header: Header{Now: t0 + 2000}, Caller: mbpCaller, ID: "machine:mbp"}),
			check: func(t *testing.T, h *harness, res interface{}) {
				r := res.(Resource)
				if want := attrs(`{"load":0.5,"duties":["a"]}`); !reflect.DeepEqual(r.Attrs, want) {
					t.Errorf("Apply().Attrs = %s, want %s", jsonOf(r.Attrs), jsonOf(want))
				}
				if r.ExpiresAt != t0+2000+ttl {
					t.Errorf("Apply().ExpiresAt = %d, want %d", r.ExpiresAt, t0+2000+ttl)
				}
			},
		},
		{
			name:    "expiresAt equal to now",
			setup:   short,
			cmd:     constant(HeartbeatResource{Header: Header{Now: t0 + 1000}, Caller: memberCaller, ID: "machine:mbp"}),
			wantErr: []error{ErrNotFound},
		},
		{
			name:    "expiresAt before now",
			setup:   short,
			cmd:     constant(HeartbeatResource{Header: Header{Now: t0 + 5000}, Caller: memberCaller, ID: "machine:mbp"}),
			wantErr: []error{ErrNotFound},
		},
		{
			name: "merged attrs over 16 KiB",
			setup: func(h *harness) {
				c := registerCmd(t0, memberCaller, "machine:mbp", "mbp")
				c.Attrs = bigAttrs("a", 10_000)
				h.mustApply(c)
			},
			cmd:     constant(HeartbeatResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:mbp", Attrs: bigAttrs("b", 10_000)}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "attrs over 16 KiB",
			setup:   registered,
			cmd:     constant(HeartbeatResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:mbp", Attrs: bigAttrs("b", wire.MaxAttrsBytes+1)}),
			wantErr: []error{ErrInvalidCommand},
		},
	}
	runApplyCases(t, append(cases, resourceRefusals(func(c Caller, id string) Command {
		return HeartbeatResource{Header: Header{Now: t0}, Caller: c, ID: id}
	})...))
}

// A heartbeat builds a new attrs map: a record handed out earlier (or held by
// a snapshot being persisted) must not see the merge.
func TestFSM_ApplyHeartbeatResourceCopiesAttrs(t *testing.T) {
	h := newHarness(t)
	h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp"))
	before, _ := h.f.Resource("machine:mbp")
	h.mustApply(HeartbeatResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp", Attrs: attrs(`{"load":9}`)})
	if got := string(before.Attrs["load"]); got != "0.5" {
		t.Errorf("earlier Resource().Attrs[load] = %s after heartbeat, want 0.5", got)
	}
}

func TestFSM_ApplyDeleteResource(t *testing.T) {
	registered := func(h *harness) { h.mustApply(registerCmd(t0, memberCaller, "machine:mbp", "mbp")) }
	cases := []applyCase{
		{
			name:  "deletes",
			setup: registered,
			cmd:   constant(DeleteResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:mbp"}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if res != nil {
					t.Errorf("Apply() = %v, want nil", res)
				}
				if _, ok := h.f.Resource("machine:mbp"); ok {
					t.Errorf("Resource() found after delete")
				}
				if got := h.f.Index(TableResources); got != h.index {
					t.Errorf("Index(TableResources) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name:  "machine token deletes its own",
			setup: registered,
			cmd:   constant(DeleteResource{Header: Header{Now: t0}, Caller: mbpCaller, ID: "machine:mbp"}),
		},
		{
			name: "expired",
			setup: func(h *harness) {
				registerMbp(h, 1)
			},
			cmd:     constant(DeleteResource{Header: Header{Now: t0 + 1}, Caller: memberCaller, ID: "machine:mbp"}),
			wantErr: []error{ErrNotFound},
		},
		{
			name:    "id with control char",
			cmd:     constant(DeleteResource{Header: Header{Now: t0}, Caller: memberCaller, ID: "machine:\x00"}),
			wantErr: []error{ErrInvalidCommand},
		},
	}
	runApplyCases(t, append(cases, resourceRefusals(func(c Caller, id string) Command {
		return DeleteResource{Header: Header{Now: t0}, Caller: c, ID: id}
	})...))
}

func TestFSM_ApplyIssueToken(t *testing.T) {
	sumOne, sumTwo := sha256.Sum256([]byte("token-one")), sha256.Sum256([]byte("token-two"))
	cases := []applyCase{
		{
			name: "issues",
			cmd:  constant(IssueToken{Header: Header{Now: t0 + 1}, Machine: "mbp", SHA256: tokenSumOne}),
			check: func(t *testing.T, h *harness, res interface{}) {
				want := MemberToken{Machine: "mbp", SHA256: tokenSumOne, IssuedAt: "2023-11-14T22:13:20.001Z"}
				if res != want {
					t.Errorf("Apply() = %+v, want %+v", res, want)
				}
				if m, ok := h.f.MachineForToken(sumOne); !ok || m != "mbp" {
					t.Errorf("MachineForToken() = %q, %v, want mbp, true", m, ok)
				}
				if got := h.f.Tokens(); len(got) != 2 || got[1] != want {
					t.Errorf("Tokens() = %+v, want base then %+v", got, want)
				}
				if got := h.f.Index(TableTokens); got != h.index {
					t.Errorf("Index(TableTokens) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name: "reissue replaces the previous hash",
			setup: func(h *harness) {
				h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne})
			},
			cmd: constant(IssueToken{Header: Header{Now: t0 + 2}, Machine: "mbp", SHA256: tokenSumTwo}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if m, ok := h.f.MachineForToken(sumOne); ok {
					t.Errorf("MachineForToken(old) = %q, true, want not found", m)
				}
				if m, ok := h.f.MachineForToken(sumTwo); !ok || m != "mbp" {
					t.Errorf("MachineForToken(new) = %q, %v, want mbp, true", m, ok)
				}
				if got := h.f.Counts().Tokens; got != 2 {
					t.Errorf("Counts().Tokens = %d, want 2", got)
				}
				if got := h.f.st.byHash; len(got) != 2 {
					t.Errorf("byHash = %v, want 2 entries", got)
				}
			},
		},
		{
			name: "reissue of the same hash",
			setup: func(h *harness) {
				h.mustApply(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne})
			},
			cmd: constant(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if m, ok := h.f.MachineForToken(sumOne); !ok || m != "mbp" {
					t.Errorf("MachineForToken() = %q, %v, want mbp, true", m, ok)
				}
			},
		},
		{
			name:    "machine __proto__",
			cmd:     constant(IssueToken{Header: Header{Now: t0}, Machine: "__proto__", SHA256: tokenSumOne}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "machine empty",
			cmd:     constant(IssueToken{Header: Header{Now: t0}, SHA256: tokenSumOne}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "hash upper case",
			cmd:     constant(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: strings.ToUpper(tokenSumOne)}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "hash too short",
			cmd:     constant(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumOne[:63]}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "hash of another machine's token",
			cmd:     constant(IssueToken{Header: Header{Now: t0}, Machine: "mbp", SHA256: tokenSumThree}),
			wantErr: []error{ErrInvalidCommand},
		},
	}
	runApplyCases(t, cases)
}

func TestFSM_ApplyRevokeToken(t *testing.T) {
	sumThree := sha256.Sum256([]byte("token-three"))
	cases := []applyCase{
		{
			name: "revokes",
			cmd:  constant(RevokeToken{Header: Header{Now: t0}, Machine: "base"}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if res != nil {
					t.Errorf("Apply() = %v, want nil", res)
				}
				if m, ok := h.f.MachineForToken(sumThree); ok {
					t.Errorf("MachineForToken() = %q, true, want not found", m)
				}
				if got := h.f.Tokens(); len(got) != 0 {
					t.Errorf("Tokens() = %+v, want none", got)
				}
				if got := h.f.Index(TableTokens); got != h.index {
					t.Errorf("Index(TableTokens) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name:    "unknown machine",
			cmd:     constant(RevokeToken{Header: Header{Now: t0}, Machine: "mbp"}),
			wantErr: []error{ErrNotFound},
		},
		{
			name:    "revoked twice",
			setup:   func(h *harness) { h.mustApply(RevokeToken{Header: Header{Now: t0}, Machine: "base"}) },
			cmd:     constant(RevokeToken{Header: Header{Now: t0}, Machine: "base"}),
			wantErr: []error{ErrNotFound},
		},
	}
	runApplyCases(t, cases)
}

func TestFSM_MachineForToken(t *testing.T) {
	h := newBaseline(t)
	tests := []struct {
		name   string
		token  string
		want   string
		wantOK bool
	}{
		{name: "issued", token: "token-three", want: "base", wantOK: true},
		{name: "never issued", token: "token-one"},
		{name: "empty", token: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := h.f.MachineForToken(sha256.Sum256([]byte(tt.token)))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("MachineForToken() = %q, %v, want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestFSM_ApplyClaimPrimary(t *testing.T) {
	cases := []applyCase{
		{
			name:  "claims at the entry's term",
			setup: func(h *harness) { h.term = 4 },
			cmd:   constant(ClaimPrimary{Header: Header{Now: t0 + 500}, Holder: "node-b", GraceMs: 2000}),
			check: func(t *testing.T, h *harness, res interface{}) {
				want := Primary{Holder: "node-b", Generation: 4, ClaimedAt: t0 + 500, Index: h.index}
				if res != want {
					t.Errorf("Apply() = %+v, want %+v", res, want)
				}
				if got := h.f.Primary(); got != want {
					t.Errorf("Primary() = %+v, want %+v", got, want)
				}
				if got := h.f.Index(TablePrimary); got != h.index {
					t.Errorf("Index(TablePrimary) = %d, want %d", got, h.index)
				}
				if got := h.f.LastNow(); got != t0+500 {
					t.Errorf("LastNow() = %d, want %d", got, t0+500)
				}
			},
		},
		{
			name:  "a claim may move time back",
			setup: func(h *harness) { h.term = 4 },
			cmd:   constant(ClaimPrimary{Header: Header{Now: t0 - 3_600_000}, Holder: "node-c"}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := h.f.LastNow(); got != t0-3_600_000 {
					t.Errorf("LastNow() = %d, want %d", got, t0-3_600_000)
				}
			},
		},
		// A refused claim leaves lastNow alone (it used to reset it to 0),
		// so these are stamped an hour ahead and Hash must still match.
		{
			name:    "holder empty",
			cmd:     constant(ClaimPrimary{Header: Header{Now: t0 + 3_600_000}, GraceMs: 1000}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "holder upper case",
			cmd:     constant(ClaimPrimary{Header: Header{Now: t0 + 3_600_000}, Holder: "Node-A", GraceMs: 1000}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "holder over 32 chars",
			cmd:     constant(ClaimPrimary{Header: Header{Now: t0 + 3_600_000}, Holder: strings.Repeat("n", 33), GraceMs: 1000}),
			wantErr: []error{ErrInvalidCommand},
		},
		{
			name:    "grace negative",
			cmd:     constant(ClaimPrimary{Header: Header{Now: t0 + 3_600_000}, Holder: "node-b", GraceMs: -1}),
			wantErr: []error{ErrInvalidCommand},
		},
	}
	runApplyCases(t, cases)
}

// A refused claim must not reset the cluster time: if it did, the next claim
// would see remaining = expiresAt − 0 and push every TTL decades out.
func TestFSM_ApplyClaimPrimaryRefusedKeepsTime(t *testing.T) {
	h := newBaseline(t)
	h.term++
	if res := h.apply(ClaimPrimary{Header: Header{Now: t0}, Holder: "Bad Holder", GraceMs: 1000}); !isErr(res, ErrInvalidCommand) {
		t.Fatalf("Apply() = %v, want %v", res, ErrInvalidCommand)
	}
	if got := h.f.LastNow(); got != t0 {
		t.Fatalf("LastNow() = %d, want %d", got, t0)
	}
	h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-b", GraceMs: 1000})
	if r, _ := h.f.Resource("machine:base"); r.ExpiresAt != t0+ttl+1000 {
		t.Errorf("ExpiresAt after claim = %d, want %d", r.ExpiresAt, t0+ttl+1000)
	}
}

func TestFSM_ApplySweep(t *testing.T) {
	cases := []applyCase{
		{
			name: "expires exactly the due records",
			setup: func(h *harness) {
				for _, r := range []struct {
					id  string
					ttl int64
				}{{"machine:short", 1000}, {"machine:edge", 2000}, {"machine:long", 2001}} {
					c := registerCmd(t0, memberCaller, r.id, "mbp")
					c.TTLMs = r.ttl
					h.mustApply(c)
				}
				for _, ttl := range []int64{2000, 5000, 1} {
					c := acquireCmd(t0, memberCaller, "lease")
					c.TTLMs = ttl
					h.mustApply(c)
				}
			},
			cmd: constant(Sweep{Header: Header{Now: t0 + 2000}}),
			check: func(t *testing.T, h *harness, res interface{}) {
				want := SweepResult{Resources: []string{"machine:edge", "machine:short"}, Leases: []int{31451, 31453}}
				if !reflect.DeepEqual(res, want) {
					t.Errorf("Apply() = %+v, want %+v", res, want)
				}
				var ids []string
				for _, r := range h.f.Resources("", "") {
					ids = append(ids, r.ID)
				}
				if want := []string{"machine:base", "machine:long"}; !reflect.DeepEqual(ids, want) {
					t.Errorf("Resources() = %v, want %v", ids, want)
				}
				var ports []int
				for _, l := range h.f.Leases() {
					ports = append(ports, l.Port)
				}
				if want := []int{31450, 31452}; !reflect.DeepEqual(ports, want) {
					t.Errorf("Leases() = %v, want %v", ports, want)
				}
				if h.f.Index(TableResources) != h.index || h.f.Index(TableLeases) != h.index {
					t.Errorf("Index() = %d, %d, want %d for both", h.f.Index(TableResources), h.f.Index(TableLeases), h.index)
				}
			},
		},
		{
			name: "nothing due",
			cmd:  constant(Sweep{Header: Header{Now: t0 + 1}}),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := jsonOf(res); got != `{"resources":[],"leases":[]}` {
					t.Errorf("Apply() = %s, want empty lists", got)
				}
				if h.f.Index(TableResources) != 2 || h.f.Index(TableLeases) != 3 {
					t.Errorf("Index() = %d, %d, want 2, 3 (unchanged)", h.f.Index(TableResources), h.f.Index(TableLeases))
				}
			},
		},
	}
	runApplyCases(t, cases)
}

// A remembered Idempotency-Key is pruned by a Sweep even when no TTL is live
// (its lease ended, nothing else is held): NextExpiry reports the key's end,
// so the leader's sweep loop proposes a Sweep then, and that Sweep forgets it.
// Otherwise a cluster left idle would keep its keys, up to the bound, forever.
func TestFSM_SweepForgetsKeysWithNoTTLLive(t *testing.T) {
	const key = "idem-1"
	for _, format := range []int{1, 2} {
		for _, tc := range []struct {
			name string
			end  Command // ends the key's lease
		}{
			{"lease released", ReleaseLease{Header: Header{Now: t0 + 500}, Caller: memberCaller, Port: bandLow, LeaseID: "lease-1"}},
			{"lease expired and swept", Sweep{Header: Header{Now: t0 + 1000}}},
		} {
			t.Run(fmt.Sprintf("format %d, %s", format, tc.name), func(t *testing.T) {
				h := newHarness(t)
				h.mustApply(ClaimPrimary{Header: Header{Now: t0}, Holder: "node-a", GraceMs: 1000})
				if format == 2 {
					h.mustApply(SetFormat{Header: Header{Now: t0}, Level: 2})
				}
				first := acquireCmd(t0, memberCaller, "lease-1")
				first.TTLMs, first.IdempotencyKey = 1000, key
				h.mustApply(first)
				h.mustApply(tc.end)
				if c := h.f.Counts(); c.Resources != 0 || c.Leases != 0 {
					t.Fatalf("Counts() = %+v, want no resource and no lease", c)
				}
				until := t0 + IdempotencyRetentionMs
				if got, ok := h.f.NextExpiry(); !ok || got != until {
					t.Fatalf("NextExpiry() = %d, %v with only the key remembered, want %d, true", got, ok, until)
				}
				retry := func(now int64, leaseID string) interface{} {
					c := first
					c.Now, c.LeaseID = now, leaseID
					return h.apply(c)
				}
				// A Sweep before the key's end keeps it: a retry is still refused.
				h.mustApply(Sweep{Header: Header{Now: until - 1}})
				if res := retry(until-1, "lease-2"); !isErr(res, ErrIdempotencyKeyUsed) {
					t.Fatalf("retry before the key's end = %v, want %v", res, ErrIdempotencyKeyUsed)
				}
				// The Sweep at its end forgets it, and nothing is left to sweep.
				if got := jsonOf(h.mustApply(Sweep{Header: Header{Now: until}})); got != `{"resources":[],"leases":[]}` {
					t.Errorf("Sweep at the key's end = %s, want empty lists", got)
				}
				h.f.mu.RLock()
				n := len(h.f.st.idem)
				h.f.mu.RUnlock()
				if n != 0 {
					t.Errorf("%d keys remembered after the Sweep at the key's end, want 0", n)
				}
				if got, ok := h.f.NextExpiry(); ok {
					t.Errorf("NextExpiry() = %d, true after the key was forgotten, want false", got)
				}
				if l, ok := retry(until, "lease-3").(PortLease); !ok || l.LeaseID != "lease-3" {
					t.Errorf("retry after the key was forgotten = %v, want a new grant of lease-3", l)
				}
				checkIndexes(t, h.f, "after the sweep")
			})
		}
	}
}

func isErr(res interface{}, want error) bool {
	err, ok := res.(error)
	return ok && errors.Is(err, want)
}
