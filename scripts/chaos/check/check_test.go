package check

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

const ms = int64(time.Millisecond)

// acquire records a grant of port to client c over [call, ret] (milliseconds).
func acquire(c int, call, ret int64, port int, id string) Op {
	return Op{Client: c, Kind: LeaseAcquire, Call: call * ms, Return: ret * ms, Outcome: OK, Status: 201,
		Port: port, LeaseID: id, Purpose: "p-" + id, TTLMs: 600_000, Generation: 2}
}

func release(c int, call, ret int64, port int, id string, out Outcome, status int) Op {
	return Op{Client: c, Kind: LeaseRelease, Call: call * ms, Return: ret * ms, Outcome: out, Status: status, Port: port, LeaseID: id, TTLMs: 600_000}
}

func renew(c int, call, ret int64, port int, id string, out Outcome, status int) Op {
	return Op{Client: c, Kind: LeaseRenew, Call: call * ms, Return: ret * ms, Outcome: out, Status: status, Port: port, LeaseID: id, TTLMs: 600_000}
}

func leaseRead(c int, call, ret int64, ls ...wire.PortLease) Op {
	return Op{Client: c, Kind: LeaseRead, Call: call * ms, Return: ret * ms, Outcome: OK, Status: 200, Leases: ls, Generation: 2}
}

func lease(port int, id string) wire.PortLease {
	return wire.PortLease{Port: port, LeaseID: id, Purpose: "p-" + id}
}

func register(c int, call, ret int64, id, v string, out Outcome) Op {
	return Op{Client: c, Kind: ResRegister, Call: call * ms, Return: ret * ms, Outcome: out, Status: 200, ResID: id, Value: v}
}

func resRead(c int, call, ret int64, rs ...wire.Resource) Op {
	return Op{Client: c, Kind: ResRead, Call: call * ms, Return: ret * ms, Outcome: OK, Status: 200, Resources: rs}
}

func resource(id, w, hb string) wire.Resource {
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(hb)
	return wire.Resource{ID: id, Attrs: map[string]json.RawMessage{AttrWrite: a, AttrHeartbeat: b}}
}

func kinds(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Kind)
	}
	return strings.Join(s, ",")
}

func TestCheck_RejectsDoubleGrant(t *testing.T) {
	h := []Op{
		acquire(0, 0, 10, 31450, "lease-a"),
		acquire(1, 20, 30, 31450, "lease-b"), // port still held by lease-a
		renew(0, 40, 45, 31450, "lease-a", OK, 200),
	}
	dir := t.TempDir()
	res := Check(h, Options{OutDir: dir, Timeout: 10 * time.Second})
	if res.Linearizable {
		t.Errorf("Check(double grant).Linearizable = true, want false")
	}
	if !strings.Contains(kinds(res.Violations), "lease-overlap") {
		t.Errorf("Check(double grant) violations = %v, want a lease-overlap", res.Violations)
	}
	if len(res.Files) != 1 {
		t.Fatalf("Check(double grant).Files = %v, want one visualisation", res.Files)
	}
	if fi, err := os.Stat(res.Files[0]); err != nil || fi.Size() == 0 {
		t.Errorf("visualisation %s: %v", res.Files[0], err)
	}
}

func TestCheck_RejectsStaleLeaseRead(t *testing.T) {
	h := []Op{
		acquire(0, 0, 10, 31450, "lease-a"),
		release(0, 20, 30, 31450, "lease-a", OK, 204),
		leaseRead(1, 40, 50, lease(31450, "lease-a")), // released before the read began
	}
	res := Check(h, Options{Timeout: 10 * time.Second})
	if res.Linearizable {
		t.Errorf("Check(stale lease read).Linearizable = true, want false")
	}
}

func TestCheck_RejectsStaleResourceRead(t *testing.T) {
	h := []Op{
		register(0, 0, 10, "instance:h/1", "a", OK),
		register(1, 20, 30, "instance:h/1", "b", OK),
		resRead(2, 40, 50, resource("instance:h/1", "a", "")),
	}
	res := Check(h, Options{Timeout: 10 * time.Second})
	if res.Linearizable {
		t.Errorf("Check(stale resource read).Linearizable = true, want false")
	}
}

func TestCheck_AcceptsConcurrentHistory(t *testing.T) {
	indet := acquire(2, 5, 0, 0, "")
	indet.Outcome, indet.Status, indet.Purpose, indet.Return = Indeterminate, 0, "p-lease-c", 900*ms
	h := []Op{
		acquire(0, 0, 10, 31450, "lease-a"),
		leaseRead(1, 2, 12, lease(31450, "lease-a")),  // concurrent with the grant: sees it
		leaseRead(3, 1, 4),                            // concurrent with the grant: does not
		indet,                                         // timed out, but granted 31451 as a later read shows
		release(0, 20, 60, 31450, "lease-a", OK, 204), // concurrent with both reads below
		leaseRead(1, 25, 30, lease(31450, "lease-a"), lease(31451, "lease-c")),
		leaseRead(3, 50, 70, lease(31451, "lease-c")),
		acquire(1, 75, 80, 31450, "lease-b"), // port free again
		acquire(1, 85, 90, 31450, "lease-b"), // Idempotency-Key replay
		release(2, 95, 99, 31451, "lease-x", Failed, 409),
		renew(1, 100, 2000, 31450, "lease-b", Indeterminate, 0),
		register(0, 0, 10, "instance:h/1", "a", OK),
		register(1, 5, 30, "instance:h/1", "b", Indeterminate),
		resRead(2, 12, 15, resource("instance:h/1", "a", "")),
		resRead(2, 40, 50, resource("instance:h/1", "b", "")),
		resRead(3, 60, 70, resource("instance:h/1", "b", "")),
		{Client: 4, Kind: ResHeartbeat, Call: 80 * ms, Return: 90 * ms, Outcome: OK, Status: 200, ResID: "instance:h/1", Value: "1"},
		resRead(2, 95, 99, resource("instance:h/1", "b", "1")),
		{Client: 4, Kind: ResDelete, Call: 100 * ms, Return: 110 * ms, Outcome: OK, Status: 204, ResID: "instance:h/1"},
		{Client: 4, Kind: ResHeartbeat, Call: 120 * ms, Return: 130 * ms, Outcome: Failed, Status: 404, ResID: "instance:h/1", Value: "2"},
		resRead(2, 140, 150),
	}
	res := Check(h, Options{OutDir: t.TempDir(), Timeout: 10 * time.Second})
	if !res.Linearizable || len(res.Violations) > 0 {
		t.Errorf("Check(good history) = %v %v, want linearizable and no violations", res.Linearizable, res.Violations)
	}
}

func TestCheck_ShortLeaseMayExpire(t *testing.T) {
	a := acquire(0, 0, 10, 31450, "lease-a")
	a.Short, a.TTLMs = true, 50
	b := acquire(1, 100, 110, 31450, "lease-b")
	h := []Op{a, b}
	res := Check(h, Options{Timeout: 10 * time.Second})
	if !res.Linearizable || len(res.Violations) > 0 {
		t.Errorf("Check(expired short lease regranted) = %v %v, want ok", res.Linearizable, res.Violations)
	}
	// The same regrant inside lease-a's TTL is an overlap in real time, and
	// lease-a seen gone before its promise ran out.
	b = acquire(1, 20, 30, 31450, "lease-b")
	res = Check([]Op{a, b}, Options{Timeout: 10 * time.Second})
	if got := kinds(res.Violations); got != "lease-overlap,renewal-expired-early" {
		t.Errorf("Check(short lease regranted early) violations = %q, want lease-overlap,renewal-expired-early", got)
	}
}

func TestCheckLeaseIntervals_LostEarly(t *testing.T) {
	h := []Op{
		acquire(0, 0, 10, 31450, "lease-a"),
		renew(0, 1000, 1010, 31450, "lease-a", Failed, 404), // TTL is 600 s
	}
	if got := kinds(CheckLeaseIntervals(h)); got != "lease-lost-early" {
		t.Errorf("CheckLeaseIntervals(404 within TTL) = %q, want lease-lost-early", got)
	}
	h[1].Call, h[1].Return = 700_000*ms, 700_010*ms
	if got := CheckLeaseIntervals(h); len(got) != 0 {
		t.Errorf("CheckLeaseIntervals(404 after TTL) = %v, want none", got)
	}
}

func TestCheckGenerations(t *testing.T) {
	r1 := leaseRead(0, 0, 10)
	r1.Generation = 5
	r2 := leaseRead(0, 20, 30)
	r2.Generation = 4
	p1 := Op{Client: 1, Kind: PrimaryPoll, Node: "node-a", Epoch: 1, Call: 0, Return: 1, Outcome: OK, Known: true, Generation: 5}
	p2 := Op{Client: 1, Kind: PrimaryPoll, Node: "node-a", Epoch: 2, Call: 2, Return: 3, Outcome: OK, Known: true, Generation: 3} // restarted
	p3 := Op{Client: 1, Kind: PrimaryPoll, Node: "node-b", Epoch: 1, Call: 4, Return: 5, Outcome: OK, Known: false, Generation: 1}
	if got := kinds(CheckGenerations([]Op{r1, r2, p1, p2, p3})); got != "generation-regressed" {
		t.Errorf("CheckGenerations() = %q, want one generation-regressed", got)
	}
}

func TestCheckFinal(t *testing.T) {
	h := []Op{
		acquire(0, 0, 10, 31450, "lease-a"),
		acquire(1, 0, 10, 31451, "lease-b"),
		release(1, 20, 30, 31451, "lease-b", Indeterminate, 0),
		register(0, 0, 10, "machine:m", "a", OK),
		register(0, 20, 30, "machine:m", "b", OK),
	}
	if got := CheckFinal(h, []wire.PortLease{lease(31450, "lease-a")}, []wire.Resource{resource("machine:m", "b", "")}); len(got) != 0 {
		t.Errorf("CheckFinal(complete state) = %v, want none", got)
	}
	got := CheckFinal(h, nil, []wire.Resource{resource("machine:m", "a", "")})
	if kinds(got) != "acknowledged-write-lost,acknowledged-write-lost" {
		t.Errorf("CheckFinal(lost lease and register) = %v, want two acknowledged-write-lost", got)
	}
}

func TestCheckIdempotency(t *testing.T) {
	a := acquire(0, 0, 10, 31450, "lease-a")
	a.Leases = []wire.PortLease{{Port: 31450, LeaseID: "lease-a", Purpose: a.Purpose, GrantedAt: 1000, ExpiresAt: 4000}}
	b := acquire(0, 20, 30, 31451, "lease-b")
	b.Purpose = a.Purpose // a retry under the same Idempotency-Key that granted another lease
	b.Leases = []wire.PortLease{{Port: 31451, LeaseID: "lease-b", Purpose: a.Purpose, GrantedAt: 2000, ExpiresAt: 5000}}
	if got, _ := CheckIdempotency([]Op{a, b}); kinds(got) != "idempotency-broken" {
		t.Errorf("CheckIdempotency(second grant while the first is live) = %q, want one idempotency-broken", kinds(got))
	}
	// The cluster remembers a key for 10 minutes whatever became of its lease
	// (regression for partition-halves: a late duplicate granted a second lease).
	rel := release(0, 12, 14, 31450, "lease-a", OK, 204)
	if got, _ := CheckIdempotency([]Op{a, rel, b}); kinds(got) != "idempotency-broken" {
		t.Errorf("CheckIdempotency(second grant after release) = %v, want one idempotency-broken", got)
	}
	b.Leases[0].GrantedAt = 4500 // after the first expired: still within the key's retention
	if got, _ := CheckIdempotency([]Op{a, b}); kinds(got) != "idempotency-broken" {
		t.Errorf("CheckIdempotency(second grant after expiry) = %v, want one idempotency-broken", got)
	}
}

func TestCheckGenerations_TwoPrimaries(t *testing.T) {
	a := Op{Client: 0, Kind: PrimaryPoll, Node: "node-a", Epoch: 1, Call: 0, Return: 1, Outcome: OK, Known: true, Generation: 4, Holder: "node-a"}
	b := Op{Client: 1, Kind: PrimaryPoll, Node: "node-b", Epoch: 1, Call: 0, Return: 1, Outcome: OK, Known: true, Generation: 4, Holder: "node-b"}
	c := Op{Client: 1, Kind: PrimaryPoll, Node: "node-c", Epoch: 1, Call: 2, Return: 3, Outcome: OK, Known: true, Generation: 5, Holder: "node-b"}
	if got := kinds(CheckGenerations([]Op{a, b, c})); got != "two-primaries" {
		t.Errorf("CheckGenerations() = %q, want one two-primaries", got)
	}
}

func TestCheck_IndeterminateAcquireResolution(t *testing.T) {
	first := acquire(2, 0, 0, 0, "")
	first.Outcome, first.Status, first.Purpose, first.Return = Indeterminate, 0, "p-lease-a", 3000*ms
	retry := acquire(2, 3100, 3110, 31450, "lease-a") // replays the grant the first made
	replay := []Op{first, leaseRead(1, 1000, 1010, lease(31450, "lease-a")), retry}
	if res := Check(replay, Options{Timeout: 10 * time.Second}); !res.Linearizable || len(res.Violations) > 0 {
		t.Errorf("Check(grant seen before its replay) = %v %v, want ok", res.Linearizable, res.Violations)
	}
	// The first request applied late, after its retry's lease was released,
	// granting a second lease: the cluster must refuse that (409
	// idempotency-key-used), so the checker reports it.
	late := []Op{first, acquire(2, 3100, 3110, 31450, "lease-a"), release(2, 3200, 3210, 31450, "lease-a", OK, 204),
		leaseRead(1, 3300, 3310, wire.PortLease{Port: 31451, LeaseID: "lease-b", Purpose: "p-lease-a"})}
	res := Check(late, Options{Timeout: 10 * time.Second})
	if kinds(res.Violations) != "idempotency-broken" {
		t.Errorf("Check(late duplicate) = %v %v, want one idempotency-broken", res.Linearizable, res.Violations)
	}
}
