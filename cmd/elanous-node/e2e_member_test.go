package main

// End-to-end tests of the member library (issue 3) against real
// `elanous-node serve` processes: a member heartbeating and holding a port
// lease through a leader SIGKILL, and blocking /v1/primary queries (plain and
// through member.WatchPrimary) across a failover. The member library runs in
// this test process; the cluster is the harness of e2e_helpers_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func TestE2E_MemberSurvivesLeaderKill(t *testing.T) {
	t.Run("follow", func(t *testing.T) { memberSurvivesLeaderKill(t, true) })
	t.Run("resolve-only", func(t *testing.T) { memberSurvivesLeaderKill(t, false) })
}

func memberSurvivesLeaderKill(t *testing.T, follow bool) {
	c, leader, before := startE2ECluster(t)
	t.Logf("leader %s, generation %d", leader.id, before.Generation)

	const machine = "mbp"
	machineID, instanceID := "machine:"+machine, "instance:"+machine+"/e2e"
	token := c.issueMachineToken(leader, machine)

	// The member, in this process: a client over the three candidates with
	// the machine token configured for each (following the primary, when
	// follow, as `elanous-node member run` does). Every POST it sends is
	// recorded.
	var cands []member.Candidate
	for _, nd := range c.nodes {
		cands = append(cands, member.Candidate{Machine: nd.id, URL: nd.url, Tokens: member.Tokens{member.ScopeMember: token}})
	}
	posts := &postLog{base: &http.Transport{Proxy: nil}}
	resolver, err := member.NewResolver(member.ResolverConfig{
		Candidates: cands, Role: member.ScopeMember,
		HTTPClient: &http.Client{Transport: &http.Transport{Proxy: nil}},
	})
	if err != nil {
		t.Fatal(err)
	}
	client, err := member.NewClient(member.ClientConfig{Resolver: resolver, HTTPClient: &http.Client{Transport: posts}})
	if err != nil {
		t.Fatal(err)
	}
	var memberLog testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&memberLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() { t.Logf("member library log:\n%s", memberLog.String()) }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		if follow {
			_ = client.FollowPrimary(ctx)
		}
	}()
	defer func() { cancel(); <-followDone }()

	// The lease: acquired through the member client, then kept.
	actx, acancel := context.WithTimeout(ctx, 5*time.Second)
	lease, err := client.AcquirePortLease(actx, wire.AcquireRequest{Machine: machine, Purpose: "e2e-member", TTLMs: e2eLeaseTTL.Milliseconds()}, "")
	acancel()
	if err != nil {
		t.Fatalf("acquire a port lease through the member client: %v", err)
	}
	if lease.LeaseID == "" || lease.TTLMs != e2eLeaseTTL.Milliseconds() {
		t.Fatalf("acquired lease %+v, want a lease id and ttlMs %d", lease, e2eLeaseTTL.Milliseconds())
	}
	var lostCalls atomic.Int32
	lostErr := make(chan error, 4)
	var renewErrs atomic.Int32
	keeper, err := member.StartPortLease(ctx, lease.Port, lease.LeaseID, member.PortLeaseConfig{
		Client: client, Interval: e2eMemberInterval, Retry: e2eLeaseRetry, TTL: e2eLeaseTTL, Logger: logger,
		OnError:     func(error) { renewErrs.Add(1) },
		OnLeaseLost: func(err error) { lostCalls.Add(1); lostErr <- err },
	})
	if err != nil {
		t.Fatalf("StartPortLease: %v", err)
	}
	keeperStopped := false
	defer func() {
		if !keeperStopped {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = keeper.Stop(sctx)
		}
	}()

	hb, err := member.StartHeartbeat(ctx, member.HeartbeatConfig{
		Client:   client,
		Machine:  member.Resource{ID: machineID, Name: machine},
		Instance: member.Resource{ID: instanceID, Name: instanceID},
		Endpoint: "http://127.0.0.1:31414",
		Interval: e2eMemberInterval,
		Logger:   logger,
	})
	if err != nil {
		t.Fatalf("StartHeartbeat: %v", err)
	}
	defer hb.Stop()

	// Both records registered and replicated everywhere.
	testutil.Poll(t, "the member's records on every node", 5*time.Second, func() error {
		for _, nd := range c.nodes {
			list, err := queryGet[[]wire.Resource](c, nd, "/v1/resources?machine="+machine)
			if err != nil {
				return err
			}
			if len(list) != 2 {
				return fmt.Errorf("%s lists %d resources of %s", nd.id, len(list), machine)
			}
		}
		return nil
	})
	registers := len(posts.events(func(e postEvent) bool { return isRegister(e) && e.ok() }))

	// Watch the survivors: the records never go missing, the lease never
	// changes id; and when each applies the new claim.
	survivors := c.running(leader)
	mon := c.monitorMember(survivors, []string{machineID, instanceID}, lease.Port, lease.LeaseID)
	monStopped := false
	defer func() {
		if !monStopped {
			mon.stop()
		}
	}()
	claims := c.watchClaims(survivors, before.Generation)
	defer claims.stop()

	// Run ~2 s: four lease renewals and four heartbeats acknowledged.
	runStart := time.Now()
	testutil.Poll(t, "the member running ~2 s", 10*time.Second, func() error {
		select {
		case err := <-lostErr:
			t.Fatalf("the lease was lost before the kill: %v", err)
		default:
		}
		renewals := posts.events(func(e postEvent) bool { return isLeaseRenewal(e) && e.ok() && e.sent.After(runStart) })
		beats := posts.events(func(e postEvent) bool { return isHeartbeat(e) && e.ok() && e.sent.After(runStart) })
		if len(renewals) < 4 || len(beats) < 4 {
			return fmt.Errorf("%d renewals, %d heartbeats acknowledged", len(renewals), len(beats))
		}
		for _, nd := range survivors {
			if mon.count(nd.id) < 5 || claims.polls(nd.id) < 5 {
				return fmt.Errorf("monitors of %s not running yet", nd.id)
			}
		}
		return nil
	})
	preKill := testutil.Decode[wire.PortLease](t, testutil.Expect(t,
		e2eCall(http.MethodGet, fmt.Sprintf("%s/v1/leases/port/%d", leader.url, lease.Port), c.tokens.Query, nil),
		http.StatusOK))

	// SIGKILL the leader, at the generation it leads now (a loaded machine
	// may have re-elected it since the start).
	killed := leader
	now, err := getPrimary(killed.url)
	if err != nil || !now.Known || now.Holder != killed.id {
		t.Fatalf("GET /v1/primary on %s before the kill = %+v, %v; want it to lead", killed.id, now, err)
	}
	claims.arm(now.Generation, killed.id)
	killedAt := time.Now()
	killed.proc.kill(t)
	t.Logf("SIGKILL of %s took %s to reap", killed.id, time.Since(killedAt).Round(time.Millisecond))

	seen := claims.wait(t, survivors, 10*time.Second)
	firstID, first := earliest(seen)
	claim := first.claim
	newLeader := c.node(claim.Holder)
	if newLeader == killed {
		t.Fatalf("the new claim %+v names the killed node", claim)
	}
	claimedAt := time.UnixMilli(claim.ClaimedAt)
	t.Logf("failover: generation %d → %d, holder %s → %s; claimedAt %s after the SIGKILL, first seen applied on %s %s after it",
		before.Generation, claim.Generation, killed.id, newLeader.id, claimedAt.Sub(killedAt).Round(time.Millisecond),
		firstID, first.at.Sub(killedAt).Round(time.Millisecond))

	// (d) The member's first successful write after the kill.
	var firstWrite postEvent
	testutil.Poll(t, "the member's first acknowledged write after the kill", 5*time.Second, func() error {
		acked := posts.events(func(e postEvent) bool { return e.ok() && !e.sent.Before(killedAt) })
		if len(acked) == 0 {
			return errors.New("none yet")
		}
		firstWrite = acked[0]
		return nil
	})
	firstOf := func(keep func(postEvent) bool) (postEvent, bool) {
		for _, e := range posts.events(nil) {
			if e.ok() && !e.sent.Before(killedAt) && keep(e) {
				return e, true
			}
		}
		return postEvent{}, false
	}
	sinceClaim := firstWrite.at.Sub(claimedAt)
	sinceApplied := firstWrite.at.Sub(first.at)
	failed := posts.events(func(e postEvent) bool { return !e.ok() && !e.sent.Before(killedAt) && e.at.Before(firstWrite.at) })
	t.Logf("MEASURE first-write: %s %s through %s: %s after the new claim (claimedAt), %s after it was first seen applied, %s after the SIGKILL; %d failed POSTs before it",
		firstWrite.path, strconv.Itoa(firstWrite.status), c.nodeOf(firstWrite.host),
		sinceClaim.Round(time.Millisecond), sinceApplied.Round(time.Millisecond), firstWrite.at.Sub(killedAt).Round(time.Millisecond), len(failed))
	for _, e := range failed {
		t.Logf("  failed POST %s via %s at +%s: %d %s", e.path, c.nodeOf(e.host), e.at.Sub(killedAt).Round(time.Millisecond), e.status, e.err)
	}
	if sinceClaim > e2eMaxFirstWrite {
		t.Errorf("the member's first successful write after the kill came %s after the new claim, want at most %s", sinceClaim, e2eMaxFirstWrite)
	}
	if firstWrite.at.Before(first.at) && firstWrite.at.Before(claimedAt) {
		t.Logf("note: a write was acknowledged (%s) before the new claim was seen; it predates the failover", firstWrite.path)
	}
	// Each loop on its own, for the record (the criterion is the member's first write).
	for _, k := range []struct {
		name string
		keep func(postEvent) bool
	}{{"heartbeat", isHeartbeat}, {"lease renewal", isLeaseRenewal}} {
		testutil.Poll(t, "a "+k.name+" after the kill", 5*time.Second, func() error {
			if _, ok := firstOf(k.keep); !ok {
				return errors.New("none yet")
			}
			return nil
		})
		e, _ := firstOf(k.keep)
		d := e.at.Sub(claimedAt)
		t.Logf("MEASURE first-%s: %s after the new claim, via %s", strings.ReplaceAll(k.name, " ", "-"), d.Round(time.Millisecond), c.nodeOf(e.host))
		if follow && d > e2eMaxFirstWrite {
			t.Errorf("the member's first successful %s after the kill came %s after the new claim, want at most %s", k.name, d, e2eMaxFirstWrite)
		}
	}

	// (c) The new leader holds the lease under the same id, renewed in the
	// new term, expiring later than before the kill.
	var after wire.PortLease
	testutil.Poll(t, "the lease renewed on the new leader", 5*time.Second, func() error {
		var err error
		if after, err = c.leaseOf(newLeader, lease.Port); err != nil {
			return err
		}
		if after.RenewedAt < claim.ClaimedAt {
			return fmt.Errorf("renewedAt %d is before the new claim at %d", after.RenewedAt, claim.ClaimedAt)
		}
		return nil
	})
	if after.LeaseID != lease.LeaseID {
		t.Errorf("after the failover the lease on port %d has leaseId %q, want the original %q", lease.Port, after.LeaseID, lease.LeaseID)
	}
	if after.ExpiresAt <= preKill.ExpiresAt {
		t.Errorf("after the failover the lease expires at %d, not later than before the kill (%d)", after.ExpiresAt, preKill.ExpiresAt)
	}
	t.Logf("lease on port %d: leaseId %s before and after; expiresAt %d → %d (+%d ms), renewedAt %d → %d",
		lease.Port, after.LeaseID, preKill.ExpiresAt, after.ExpiresAt, after.ExpiresAt-preKill.ExpiresAt, preKill.RenewedAt, after.RenewedAt)

	// Keep running past the point where anything not renewed since the kill
	// would have expired (TTL plus the new leader's grace): the member's own
	// acknowledged renewals tell when that is.
	horizon := killedAt.Add(e2eLeaseTTL + 2*e2eElection + 500*time.Millisecond)
	testutil.Poll(t, "lease renewals past the TTL horizon", 10*time.Second, func() error {
		if len(posts.events(func(e postEvent) bool { return isLeaseRenewal(e) && e.ok() && e.sent.After(horizon) })) == 0 {
			return errors.New("none yet")
		}
		return nil
	})

	violations, checks := mon.stop()
	monStopped = true
	for _, v := range violations {
		t.Errorf("member records: %s", v)
	}
	for _, nd := range survivors {
		if checks[nd.id] < 20 {
			t.Errorf("the monitor completed only %d checks on %s; it did not watch the failover", checks[nd.id], nd.id)
		}
	}
	t.Logf("monitor: %v complete checks on the survivors, %d violations", checks, len(violations))

	// (b) Same lease, never lost; (a) the records were never re-registered.
	if n := lostCalls.Load(); n != 0 {
		t.Errorf("OnLeaseLost was called %d times: %v", n, keeper.Err())
	}
	if keeper.Err() != nil || keeper.LeaseID() != lease.LeaseID {
		t.Errorf("keeper: Err %v, LeaseID %q; want nil and %q", keeper.Err(), keeper.LeaseID(), lease.LeaseID)
	}
	if n := len(posts.events(func(e postEvent) bool { return isRegister(e) && e.ok() })); n != registers {
		t.Errorf("the member registered %d times in all, %d before the kill: a record was lost and registered again", n, registers)
	}
	t.Logf("renewal failures reported to OnError: %d", renewErrs.Load())

	// Stop cleanly: the keeper releases the lease; the records stay.
	hb.Stop()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = keeper.Stop(sctx)
	scancel()
	keeperStopped = true
	if err != nil {
		t.Errorf("keeper.Stop (release) = %v", err)
	}
	testutil.Poll(t, "the lease released on the new leader", 5*time.Second, func() error {
		_, err := testutil.DoExpect(e2eCall(http.MethodGet, fmt.Sprintf("%s/v1/leases/port/%d", newLeader.url, lease.Port), c.tokens.Query, nil), http.StatusNotFound)
		return err
	})
	for _, id := range []string{machineID, instanceID} {
		testutil.Expect(t, e2eCall(http.MethodGet, newLeader.url+"/v1/resources/"+member.EscapeID(id), c.tokens.Query, nil), http.StatusOK)
	}
	if strings.Contains(memberLog.String(), token) {
		t.Error("the member library logged its token")
	}

	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}

// blockingResult is the answer to one blocking GET /v1/primary.
type blockingResult struct {
	at      time.Time
	status  int
	index   uint64
	primary wire.Primary
	err     error
}

// blockingPrimary sends GET /v1/primary?index=N&wait=30s to nd; written is
// closed once the request is on the wire, the answer arrives on the channel.
func blockingPrimary(nd *e2eNode, index uint64) (written chan struct{}, result chan blockingResult) {
	written, result = make(chan struct{}), make(chan blockingResult, 1)
	go func() {
		var once sync.Once
		call := testutil.Call{
			Method:  http.MethodGet,
			URL:     fmt.Sprintf("%s/v1/primary?index=%d&wait=30s", nd.url, index),
			OnWrote: func() { once.Do(func() { close(written) }) },
			Client:  testutil.NewClient(40*time.Second, false),
		}
		r, err := testutil.Do(call)
		if err != nil {
			once.Do(func() { close(written) })
			result <- blockingResult{at: time.Now(), err: err}
			return
		}
		res := blockingResult{at: time.Now(), status: r.Status}
		res.index, _ = strconv.ParseUint(r.Header.Get(wire.HeaderIndex), 10, 64)
		res.err = json.Unmarshal(r.Body, &res.primary)
		result <- res
	}()
	return written, result
}

// TestE2E_PrimaryBlockingQuery: a blocking GET /v1/primary?index=N&wait=30s
// on a surviving follower returns the new claim within 200 ms of that node
// applying it, and member.WatchPrimary delivers the new primary.
func TestE2E_PrimaryBlockingQuery(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
		t.Run(name, func(t *testing.T) { testPrimaryBlockingQuery(t, sig, name) })
	}
}

func testPrimaryBlockingQuery(t *testing.T, sig syscall.Signal, sigName string) {
	c, leader, before := startE2ECluster(t)
	followers := c.running(leader)
	t.Logf("leader %s, generation %d; blocking queries on %s and %s", leader.id, before.Generation, followers[0].id, followers[1].id)

	// member.WatchPrimary over the three candidates, as a member would.
	type delivery struct {
		at time.Time
		p  wire.Primary
	}
	var dmu sync.Mutex
	var deliveries []delivery
	var cands []member.Candidate
	for _, nd := range c.nodes {
		cands = append(cands, member.Candidate{Machine: nd.id, URL: nd.url})
	}
	wctx, wcancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- member.WatchPrimary(wctx, cands, func(p wire.Primary) {
			dmu.Lock()
			deliveries = append(deliveries, delivery{at: time.Now(), p: p})
			dmu.Unlock()
		})
	}()
	defer func() {
		wcancel()
		select {
		case <-watchDone:
		case <-time.After(10 * time.Second):
			t.Error("WatchPrimary did not return within 10 s of its context ending")
		}
	}()
	firstDelivery := func(minGen uint64) (delivery, bool) {
		dmu.Lock()
		defer dmu.Unlock()
		for _, d := range deliveries {
			if d.p.Generation > minGen {
				return d, true
			}
		}
		return delivery{}, false
	}
	testutil.Poll(t, "WatchPrimary delivers the current primary", 5*time.Second, func() error {
		d, ok := firstDelivery(before.Generation - 1)
		if !ok {
			return errors.New("nothing delivered yet")
		}
		if d.p.Holder != leader.id || d.p.Generation != before.Generation || d.p.URL != leader.url {
			return fmt.Errorf("delivered %+v, want %s at generation %d", d.p, leader.id, before.Generation)
		}
		return nil
	})

	// One blocking query per follower, at its current index.
	type pending struct {
		nd     *e2eNode
		index  uint64
		result chan blockingResult
	}
	var queries []pending
	for _, nd := range followers {
		r := testutil.Expect(t, e2eCall(http.MethodGet, nd.url+"/v1/primary", "", nil), http.StatusOK)
		index, err := strconv.ParseUint(r.Header.Get(wire.HeaderIndex), 10, 64)
		if err != nil || index == 0 {
			t.Fatalf("GET /v1/primary on %s: %s = %q, want a positive index", nd.id, wire.HeaderIndex, r.Header.Get(wire.HeaderIndex))
		}
		written, result := blockingPrimary(nd, index)
		select {
		case <-written:
		case <-time.After(5 * time.Second):
			t.Fatalf("blocking query to %s not sent within 5 s", nd.id)
		}
		queries = append(queries, pending{nd: nd, index: index, result: result})
	}
	claims := c.watchClaims(followers, before.Generation)
	defer claims.stop()
	testutil.Poll(t, "claim watchers running", 5*time.Second, func() error {
		for _, nd := range followers {
			if claims.polls(nd.id) < 3 {
				return fmt.Errorf("%s: %d polls", nd.id, claims.polls(nd.id))
			}
		}
		return nil
	})
	// Nothing has woken the queries yet: the claim has not changed.
	for _, q := range queries {
		select {
		case res := <-q.result:
			t.Fatalf("blocking query to %s returned before the failover: %+v", q.nd.id, res)
		default:
		}
	}

	signalledAt := time.Now()
	leader.proc.signal(t, sig)
	seen := claims.wait(t, followers, 10*time.Second)
	firstID, first := earliest(seen)
	claim := first.claim
	newLeader := c.node(claim.Holder)
	if newLeader == leader {
		t.Fatalf("after %s the claim %+v still names %s", sigName, claim, leader.id)
	}
	claimedAt := time.UnixMilli(claim.ClaimedAt)
	t.Logf("%s of %s: generation %d claimed by %s %s after the signal (claimedAt), first seen applied on %s after %s",
		sigName, leader.id, claim.Generation, newLeader.id, claimedAt.Sub(signalledAt).Round(time.Millisecond),
		firstID, first.at.Sub(signalledAt).Round(time.Millisecond))

	for _, q := range queries {
		var res blockingResult
		select {
		case res = <-q.result:
		case <-time.After(10 * time.Second):
			t.Fatalf("blocking query to %s still pending 10 s after the new claim was applied there", q.nd.id)
		}
		if res.err != nil || res.status != http.StatusOK {
			t.Errorf("blocking GET /v1/primary?index=%d on %s = %d, %v", q.index, q.nd.id, res.status, res.err)
			continue
		}
		s := seen[q.nd.id]
		role := "follower"
		if q.nd == newLeader {
			role = "new leader"
		}
		wake := res.at.Sub(s.at)
		t.Logf("MEASURE blocking-query %s (%s): returned %s after the claim was seen applied there (seen between %s and %s after the signal), %s after claimedAt; answer %+v, index %d → %d",
			q.nd.id, role, wake.Round(time.Millisecond), s.prevSent.Sub(signalledAt).Round(time.Millisecond), s.at.Sub(signalledAt).Round(time.Millisecond),
			res.at.Sub(claimedAt).Round(time.Millisecond), res.primary, q.index, res.index)
		if res.primary.Generation <= before.Generation || res.primary.Holder != claim.Holder {
			t.Errorf("blocking query on %s (%s) returned %+v, want holder %s at generation %d", q.nd.id, role, res.primary, claim.Holder, claim.Generation)
		}
		if res.index <= q.index {
			t.Errorf("blocking query on %s returned %s %d, want above %d", q.nd.id, wire.HeaderIndex, res.index, q.index)
		}
		if wake > e2eMaxBlockingWake {
			t.Errorf("blocking query on %s (%s) returned %s after the new claim was applied there, want at most %s", q.nd.id, role, wake, e2eMaxBlockingWake)
		}
		// The leader counts its claim as known from the apply that wakes the
		// query (a regression: it used to answer known:false until it marked
		// itself ready a moment later, and watchers then blocked on the new index).
		if !res.primary.Known {
			t.Errorf("blocking query on %s (%s) woke with the new claim but known:false (%+v): a watcher that trusts only known answers would miss it and block again on the new index",
				q.nd.id, role, res.primary)
		}
	}

	// member.WatchPrimary delivers the new primary.
	var d delivery
	testutil.Poll(t, "WatchPrimary delivers the new primary", 5*time.Second, func() error {
		var ok bool
		if d, ok = firstDelivery(before.Generation); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	watchDelay := d.at.Sub(first.at)
	t.Logf("MEASURE watch-primary: delivered %+v %s after the claim was first seen applied (on %s), %s after claimedAt",
		d.p, watchDelay.Round(time.Millisecond), firstID, d.at.Sub(claimedAt).Round(time.Millisecond))
	if d.p.Holder != newLeader.id || d.p.Generation != claim.Generation || d.p.URL != newLeader.url {
		t.Errorf("WatchPrimary delivered %+v, want %s (%s) at generation %d", d.p, newLeader.id, newLeader.url, claim.Generation)
	}
	if watchDelay > e2eMaxBlockingWake {
		t.Errorf("WatchPrimary delivered the new primary %s after the claim was first applied, want at most %s", watchDelay, e2eMaxBlockingWake)
	}

	if sig == syscall.SIGTERM {
		code, err := leader.proc.wait(15 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			t.Errorf("%s exit code after SIGTERM = %d, want 0", leader.id, code)
		}
	} else if _, err := leader.proc.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	for _, nd := range c.nodes {
		procs = append(procs, nd.proc)
	}
	c.checkLogs(procs...)
}
