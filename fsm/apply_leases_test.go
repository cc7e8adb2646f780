package fsm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

// Port-lease commands fed through Apply; see apply_test.go for the baseline.

func TestFSM_ApplyAcquireLease(t *testing.T) {
	invalid := func(name string, mutate func(*AcquireLease)) applyCase {
		return invalidCase(name, acquireCmd(t0, memberCaller, "lease-1"), mutate, ErrInvalidPortLease, ErrInvalidCommand)
	}
	port := func(want int) func(*testing.T, *harness, interface{}) {
		return func(t *testing.T, h *harness, res interface{}) {
			if got := res.(PortLease).Port; got != want {
				t.Errorf("Apply().Port = %d, want %d", got, want)
			}
		}
	}
	cases := []applyCase{
		{
			name: "lowest free port",
			cmd:  constant(acquireCmd(t0+7, memberCaller, "lease-1")),
			check: func(t *testing.T, h *harness, res interface{}) {
				want := PortLease{
					ID: "port-lease:31451", Port: 31451, LeaseID: "lease-1", Machine: "mbp", Purpose: "integration test",
					Owner: memberCaller.Owner, TTLMs: ttl, GrantedAt: t0 + 7, RenewedAt: t0 + 7, ExpiresAt: t0 + 7 + ttl,
					Generation: baseTerm, Fence: h.index,
				}
				if !reflect.DeepEqual(res, want) {
					t.Errorf("Apply() = %+v, want %+v", res, want)
				}
				if got, ok := h.f.Lease(31451); !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("Lease(31451) = %+v, %v, want %+v, true", got, ok, want)
				}
				if got := h.f.Index(TableLeases); got != h.index {
					t.Errorf("Index(TableLeases) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name: "fills the lowest gap",
			setup: func(h *harness) {
				h.mustApply(acquireCmd(t0, memberCaller, "lease-1"))
				h.mustApply(acquireCmd(t0, memberCaller, "lease-2"))
				h.mustApply(ReleaseLease{Header: Header{Now: t0}, Caller: memberCaller, Port: 31451, LeaseID: "lease-1"})
			},
			cmd:   constant(acquireCmd(t0, otherCaller, "lease-3")),
			check: port(31451),
		},
		{
			name:  "skips excluded ports",
			cmd:   acquireWith(t0, memberCaller, "lease-1", func(c *AcquireLease) { c.Excluded = []int{31452, 31451} }),
			check: port(31453),
		},
		{
			name: "replaces an expired lease",
			setup: func(h *harness) {
				c := acquireCmd(t0, otherCaller, "lease-old")
				c.TTLMs = 1000
				h.mustApply(c)
			},
			cmd: constant(acquireCmd(t0+1000, memberCaller, "lease-new")),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.Port != 31451 || l.LeaseID != "lease-new" || l.Owner != memberCaller.Owner || l.Fence != h.index || l.GrantedAt != t0+1000 {
					t.Errorf("Apply() = %+v, want port 31451 lease-new of %s fence %d granted %d", l, memberCaller.Owner, h.index, t0+1000)
				}
			},
		},
		{
			name:  "generation is the entry's term",
			setup: func(h *harness) { h.term = 7 },
			cmd:   constant(acquireCmd(t0, memberCaller, "lease-1")),
			check: func(t *testing.T, h *harness, res interface{}) {
				if got := res.(PortLease).Generation; got != 7 {
					t.Errorf("Apply().Generation = %d, want 7", got)
				}
			},
		},
		{
			name: "ttl capped at 24h",
			cmd:  acquireWith(t0, memberCaller, "lease-1", func(c *AcquireLease) { c.TTLMs = 48 * 3600 * 1000 }),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.TTLMs != wire.MaxLeaseTTLMs || l.ExpiresAt != t0+wire.MaxLeaseTTLMs {
					t.Errorf("Apply() ttl %d expires %d, want %d %d", l.TTLMs, l.ExpiresAt, wire.MaxLeaseTTLMs, t0+wire.MaxLeaseTTLMs)
				}
			},
		},
		{
			name: "idempotency key from the same owner returns the live lease",
			cmd:  acquireWith(t0, memberCaller, "lease-retry", func(c *AcquireLease) { c.IdempotencyKey = "idem-base" }),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.Port != 31450 || l.LeaseID != "lease-base" || l.Fence != 3 {
					t.Errorf("Apply() = %+v, want the baseline lease (31450, lease-base, fence 3)", l)
				}
				if got := h.f.Counts().Leases; got != 1 {
					t.Errorf("Counts().Leases = %d, want 1", got)
				}
				if got := h.f.Index(TableLeases); got != 3 {
					t.Errorf("Index(TableLeases) = %d, want 3 (no change)", got)
				}
			},
		},
		{
			name: "idempotency key from another owner gets a new port",
			cmd:  acquireWith(t0, otherCaller, "lease-other", func(c *AcquireLease) { c.IdempotencyKey = "idem-base" }),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.Port != 31451 || l.LeaseID != "lease-other" || l.Owner != otherCaller.Owner {
					t.Errorf("Apply() = %+v, want a new lease on 31451", l)
				}
			},
		},
		{
			// A late duplicate of an answered acquire must not grant a second
			// lease after the first one ended (found by scripts/chaos
			// partition-halves: a forwarded POST re-sent by the transport).
			name: "idempotency key of an ended lease is refused while remembered",
			setup: func(h *harness) {
				c := acquireCmd(t0, memberCaller, "lease-1")
				c.TTLMs, c.IdempotencyKey = 1000, "idem-1"
				h.mustApply(c)
			},
			cmd:     acquireWith(t0+1000, memberCaller, "lease-2", func(c *AcquireLease) { c.IdempotencyKey = "idem-1" }),
			wantErr: []error{ErrIdempotencyKeyUsed},
		},
		{
			name: "idempotency key is forgotten after the retention",
			setup: func(h *harness) {
				c := acquireCmd(t0, memberCaller, "lease-1")
				c.TTLMs, c.IdempotencyKey = 1000, "idem-1"
				h.mustApply(c)
				h.mustApply(Sweep{Header: Header{Now: t0 + IdempotencyRetentionMs}})
			},
			cmd: acquireWith(t0+IdempotencyRetentionMs, memberCaller, "lease-2", func(c *AcquireLease) { c.IdempotencyKey = "idem-1" }),
			check: func(t *testing.T, h *harness, res interface{}) {
				if l := res.(PortLease); l.LeaseID != "lease-2" || l.Fence != h.index {
					t.Errorf("Apply() = %+v, want lease-2 at fence %d", l, h.index)
				}
			},
		},
		{
			name:  "machine token leases for its machine",
			cmd:   constant(acquireCmd(t0, mbpCaller, "lease-1")),
			check: port(31451),
		},
		invalid("machine empty", func(c *AcquireLease) { c.Machine = "" }),
		invalid("machine blank", func(c *AcquireLease) { c.Machine = "   " }),
		invalid("machine __proto__", func(c *AcquireLease) { c.Machine = "__proto__" }),
		invalid("purpose empty", func(c *AcquireLease) { c.Purpose = "" }),
		invalid("purpose blank", func(c *AcquireLease) { c.Purpose = " \t" }),
		invalid("purpose too long", func(c *AcquireLease) { c.Purpose = strings.Repeat("p", wire.MaxPurposeLen+1) }),
		invalid("ttlMs 0", func(c *AcquireLease) { c.TTLMs = 0 }),
		invalid("ttlMs negative", func(c *AcquireLease) { c.TTLMs = -600000 }),
		invalid("excluded below the band", func(c *AcquireLease) { c.Excluded = []int{31460, 31449} }),
		invalid("excluded above the band", func(c *AcquireLease) { c.Excluded = []int{31500} }),
		invalid("leaseId missing", func(c *AcquireLease) { c.LeaseID = "" }),
		invalid("band start 0", func(c *AcquireLease) { c.BandStart = 0 }),
		invalid("band end below start", func(c *AcquireLease) { c.BandStart, c.BandEnd = 31499, 31450 }),
		invalid("band end above 65535", func(c *AcquireLease) { c.BandEnd = 70000 }),
		invalid("idempotency key too long", func(c *AcquireLease) { c.IdempotencyKey = strings.Repeat("k", wire.MaxIdempotencyKey+1) }),
		{
			name:    "band exhausted",
			cmd:     acquireWith(t0, memberCaller, "lease-1", func(c *AcquireLease) { c.BandStart, c.BandEnd = 31450, 31450 }),
			wantErr: []error{ErrBandExhausted},
		},
		{
			name:    "band exhausted by exclusions",
			cmd:     acquireWith(t0, memberCaller, "lease-1", func(c *AcquireLease) { c.BandStart, c.BandEnd, c.Excluded = 31451, 31452, []int{31451, 31452} }),
			wantErr: []error{ErrBandExhausted},
		},
		{
			name:    "machine token for another machine",
			cmd:     acquireWith(t0, mbpCaller, "lease-1", func(c *AcquireLease) { c.Machine = "studio" }),
			wantErr: []error{ErrForbidden},
		},
	}
	runApplyCases(t, cases)
}

func TestFSM_ApplyAcquireLeaseFillsBand(t *testing.T) {
	h := newHarness(t)
	for port := bandLow; port <= bandHigh; port++ {
		l := mustResult[PortLease](h, acquireCmd(t0, memberCaller, "lease"))
		if l.Port != port {
			t.Fatalf("Apply().Port = %d, want %d", l.Port, port)
		}
	}
	res := h.apply(acquireCmd(t0, memberCaller, "lease"))
	if err, _ := res.(error); err == nil || !isErr(err, ErrBandExhausted) {
		t.Fatalf("Apply() = %v, want %v", res, ErrBandExhausted)
	}
}

// Fences are the grants' log indexes: strictly increasing across releases,
// re-grants of the same port and term changes.
func TestFSM_ApplyAcquireLeaseFence(t *testing.T) {
	h := newHarness(t)
	var last uint64
	for i := range 20 {
		if i%5 == 0 {
			h.term++
		}
		l := mustResult[PortLease](h, acquireCmd(t0+int64(i), memberCaller, "lease"))
		if l.Fence != h.index || l.Fence <= last || l.Generation != h.term || l.Port != bandLow {
			t.Fatalf("grant %d = fence %d generation %d port %d, want fence %d > %d, generation %d, port %d",
				i, l.Fence, l.Generation, l.Port, h.index, last, h.term, bandLow)
		}
		last = l.Fence
		h.mustApply(ReleaseLease{Header: Header{Now: t0 + int64(i)}, Caller: memberCaller, Port: l.Port, LeaseID: "lease"})
	}
}

func TestFSM_ApplyRenewLease(t *testing.T) {
	cases := []applyCase{
		{
			name: "extends from now",
			cmd:  constant(renewCmd(t0+1000, memberCaller, 31450, "lease-base")),
			check: func(t *testing.T, h *harness, res interface{}) {
				l := res.(PortLease)
				if l.ExpiresAt != t0+1000+ttl || l.RenewedAt != t0+1000 || l.GrantedAt != t0 || l.Fence != 3 || l.Generation != baseTerm {
					t.Errorf("Apply() = %+v, want expires %d renewed %d granted %d fence 3", l, t0+1000+ttl, t0+1000, t0)
				}
				if got, _ := h.f.Lease(31450); !reflect.DeepEqual(got, l) {
					t.Errorf("Lease(31450) = %+v, want %+v", got, l)
				}
				if got := h.f.Index(TableLeases); got != h.index {
					t.Errorf("Index(TableLeases) = %d, want %d", got, h.index)
				}
			},
		},
		{
			name:  "machine token renews its own",
			setup: mbpLease,
			cmd:   constant(renewCmd(t0+1, mbpCaller, 31451, "lease-1")),
		},
		refused("no lease", nil, renewCmd(t0, memberCaller, 31460, "lease-base"), ErrNotFound),
		refused("expired lease", shortLease, renewCmd(t0+1000, memberCaller, 31451, "lease-1"), ErrNotFound),
		refused("other lease id", nil, renewCmd(t0, memberCaller, 31450, "lease-stale"), ErrLeaseMismatch),
		refused("other owner", nil, renewCmd(t0, otherCaller, 31450, "lease-base"), ErrForbidden),
		refused("admin gets no bypass", nil, renewCmd(t0, adminCaller, 31450, "lease-base"), ErrForbidden),
		refused("same owner under another machine", nil, renewCmd(t0, Caller{Owner: memberCaller.Owner, Machine: "studio"}, 31450, "lease-base"), ErrForbidden),
	}
	runApplyCases(t, cases)
}

func TestFSM_ApplyReleaseLease(t *testing.T) {
	released := func(t *testing.T, h *harness, res interface{}) {
		if res != nil {
			t.Errorf("Apply() = %v, want nil", res)
		}
		if _, ok := h.f.Lease(31450); ok {
			t.Errorf("Lease(31450) found after release")
		}
		if got := h.f.Index(TableLeases); got != h.index {
			t.Errorf("Index(TableLeases) = %d, want %d", got, h.index)
		}
		next := mustResult[PortLease](h, acquireCmd(t0, otherCaller, "lease-next"))
		if next.Port != 31450 {
			t.Errorf("next grant on port %d, want 31450", next.Port)
		}
	}
	cases := []applyCase{
		{
			name:  "owner releases",
			cmd:   constant(releaseCmd(t0, memberCaller, 31450, "lease-base")),
			check: released,
		},
		{
			name:  "admin releases another owner's lease",
			cmd:   constant(releaseCmd(t0, adminCaller, 31450, "lease-base")),
			check: released,
		},
		refused("no lease", nil, releaseCmd(t0, memberCaller, 31499, "lease-base"), ErrNotFound),
		refused("expired lease", shortLease, releaseCmd(t0+2000, memberCaller, 31451, "lease-1"), ErrNotFound),
		refused("owner with another lease id", nil, releaseCmd(t0, memberCaller, 31450, "lease-stale"), ErrLeaseMismatch),
		refused("admin with another lease id", nil, releaseCmd(t0, adminCaller, 31450, "lease-stale"), ErrLeaseMismatch),
		refused("other owner", nil, releaseCmd(t0, otherCaller, 31450, "lease-base"), ErrForbidden),
		// The port was re-granted to someone else: the stale holder gets 403,
		// which the TypeScript client's release tolerates, not 409.
		refused("other owner with a stale lease id", nil, releaseCmd(t0, otherCaller, 31450, "lease-stale"), ErrForbidden),
		refused("machine token of another machine", mbpLease, releaseCmd(t0, Caller{Owner: mbpCaller.Owner, Machine: "studio"}, 31451, "lease-1"), ErrForbidden),
	}
	runApplyCases(t, cases)
}

// acquireWith returns a cmd function for acquireCmd(now, caller, leaseID)
// changed by mutate.
func acquireWith(now int64, caller Caller, leaseID string, mutate func(*AcquireLease)) func(*harness) Command {
	c := acquireCmd(now, caller, leaseID)
	mutate(&c)
	return constant(c)
}

// refused is the case of cmd, applied after setup (nil: none), refused with want.
func refused(name string, setup func(*harness), cmd Command, want error) applyCase {
	return applyCase{name: name, setup: setup, cmd: constant(cmd), wantErr: []error{want}}
}

func renewCmd(now int64, caller Caller, port int, leaseID string) RenewLease {
	return RenewLease{Header: Header{Now: now}, Caller: caller, Port: port, LeaseID: leaseID}
}

func releaseCmd(now int64, caller Caller, port int, leaseID string) ReleaseLease {
	return ReleaseLease{Header: Header{Now: now}, Caller: caller, Port: port, LeaseID: leaseID}
}

// shortLease grants lease-1 on port 31451 for 1 s from t0.
func shortLease(h *harness) {
	c := acquireCmd(t0, memberCaller, "lease-1")
	c.TTLMs = 1000
	h.mustApply(c)
}

// mbpLease grants the mbp machine token lease-1 on port 31451.
func mbpLease(h *harness) { h.mustApply(acquireCmd(t0, mbpCaller, "lease-1")) }
