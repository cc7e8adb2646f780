package main

// End-to-end tests of the operations: backup and restore, leadership
// transfer, `status --check` and the rolling restart, on real processes.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// e2eGraceMs is the claim grace of the test clusters: twice their election
// timeout.
const e2eGraceMs = 2 * int64(e2eElection/time.Millisecond)

// listConsistent reads path on nd with ?consistent=true and the query token.
func listConsistent[T any](t *testing.T, c *e2eCluster, nd *e2eNode, path string) T {
	t.Helper()
	r := testutil.Send(t, e2eCall(http.MethodGet, nd.url+path+"?consistent=true", c.tokens.Query, nil))
	testutil.WantStatus(t, "GET "+path, r, http.StatusOK)
	return testutil.Decode[T](t, r)
}

// waitConverged polls every running node's status until all report one
// state hash at one applied index, at least index, and returns that status
// of the first node.
func (c *e2eCluster) waitConverged(index uint64, timeout time.Duration) wire.ClusterStatus {
	c.t.Helper()
	var first wire.ClusterStatus
	testutil.Poll(c.t, fmt.Sprintf("every node at one state hash from index %d", index), timeout, func() error {
		for i, nd := range c.running() {
			st, err := c.getStatus(nd)
			if err != nil {
				return err
			}
			if i == 0 {
				first = st
			}
			if st.AppliedIndex < index || st.AppliedIndex != first.AppliedIndex || st.StateHash != first.StateHash {
				return fmt.Errorf("%s at index %d hash %.12s; %s at index %d hash %.12s", nd.id, st.AppliedIndex, st.StateHash, c.running()[0].id, first.AppliedIndex, first.StateHash)
			}
		}
		return nil
	})
	return first
}

// waitSettled waits until a new cluster's leader has appended the entries it
// appends by itself: every node at this build's format level, with every
// node in the candidate directory. After it, only the test's writes move the
// state.
func (c *e2eCluster) waitSettled(timeout time.Duration) {
	c.t.Helper()
	testutil.Poll(c.t, "every node at the newest format with the whole directory", timeout, func() error {
		for _, nd := range c.running() {
			if err := c.atFormat(fsm.MaxFormat, nd); err != nil {
				return err
			}
			peers, err := c.peersOf(nd)
			if err != nil {
				return err
			}
			for _, p := range peers {
				if p.AddedAt == 0 {
					return fmt.Errorf("%s: %s is not in the candidate directory yet", nd.id, p.Machine)
				}
			}
		}
		return nil
	})
}

// atFormat returns an error unless each of nodes reports the format level
// want in GET /v1/cluster/status.
func (c *e2eCluster) atFormat(want int, nodes ...*e2eNode) error {
	for _, nd := range nodes {
		st, err := c.getStatus(nd)
		if err != nil {
			return err
		}
		if st.Format != want {
			return fmt.Errorf("%s at format %d", nd.id, st.Format)
		}
	}
	return nil
}

// snapshotDocument reads a snapshot file and returns its header and document.
func snapshotDocument(t *testing.T, path string) (wire.SnapshotHeader, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := wire.ReadSnapshotHeader(bufio.NewReader(bytes.NewReader(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h, data[len(h.Line()):]
}

// withoutTime decodes a snapshot document with the fields that move with
// the clock alone (lastNow) or with entries that change no table (applied)
// left out.
func withoutTime(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("snapshot document: %v", err)
	}
	delete(m, "lastNow")
	delete(m, "applied")
	// The candidate directory is the live cluster's, not the backup's: the
	// leader may still be seeding it around the restore, so its change index
	// is the cluster's own.
	if idx, ok := m["indexes"].([]any); ok && len(idx) > int(fsm.TableCandidates) {
		idx[fsm.TableCandidates] = nil
	}
	return m
}

// TestE2E_SnapshotSaveWipeRestore is issue 12's backup acceptance test:
// save a backup of a cluster holding resources, leases and a machine token;
// kill every node and wipe its Raft state; start a fresh cluster; refuse a
// corrupt and a truncated file (the state does not move); restore. Every node
// then holds exactly the backup's records with each TTL rebased by the
// claim's rule from the moment of the restore (no resource expires early),
// every lease keeps its id and fence, the backup's machine token works, and
// the claim is the fresh cluster's leader's.
func TestE2E_SnapshotSaveWipeRestore(t *testing.T) {
	c := newE2ECluster(t, 3)
	leader, _ := c.startAll()
	a := newAckedWrites()
	for i, nd := range c.nodes {
		c.register(a, nd, fmt.Sprintf("machine:saved-%d", i))
	}
	leases := []wire.PortLease{c.acquire(a, leader, "saved one"), c.acquire(a, c.nodes[1], "saved two")}
	machineToken := c.issueMachineToken(leader, "saved-0")
	testutil.Expect(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/"+member.EscapeID("machine:saved-0")+"/heartbeat", machineToken, nil), http.StatusOK)

	file := filepath.Join(t.TempDir(), "backup.snap")
	save := c.admin("snapshot", "save", file)
	if save.code != 0 {
		t.Fatalf("snapshot save:\n%s", save)
	}
	t.Logf("snapshot save:\n%s", save.stdout)
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file %s: %v, mode %v; want 0600", file, err, st.Mode())
	}
	inspect := runBin(t, nil, "snapshot", "inspect", "--json", file)
	if inspect.code != 0 {
		t.Fatalf("snapshot inspect:\n%s", inspect)
	}
	var info snapshotInfo
	if err := json.Unmarshal([]byte(inspect.stdout), &info); err != nil {
		t.Fatalf("snapshot inspect --json: %v\n%s", err, inspect.stdout)
	}
	if info.Counts.Resources != 3 || info.Counts.Leases != 2 || info.Counts.Tokens != 1 || info.Header.Index == 0 || info.Header.Generation == 0 || info.Header.FormatLevel != fsm.MaxFormat {
		t.Fatalf("snapshot inspect = %+v, want 3 resources, 2 leases, 1 token at format %d", info, fsm.MaxFormat)
	}
	savedResources := listConsistent[[]wire.Resource](t, c, leader, "/v1/resources")
	backupHeader, backupDoc := snapshotDocument(t, file)

	for _, nd := range c.nodes {
		nd.proc.kill(t)
		if err := os.RemoveAll(filepath.Join(nd.dataDir, "raft")); err != nil {
			t.Fatal(err)
		}
	}
	fresh, freshClaim := c.startAll()
	if got := listConsistent[[]wire.Resource](t, c, fresh, "/v1/resources"); len(got) != 0 {
		t.Fatalf("the fresh cluster holds %d resources, want none", len(got))
	}

	// A corrupt and a truncated file are refused — by the command before it
	// sends anything, and by the leader when sent as they are — and nothing
	// changes.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(raw)
	corrupt[len(corrupt)-20] ^= 0x20
	c.waitSettled(10 * time.Second)
	before := c.waitConverged(0, 10*time.Second)
	for name, data := range map[string][]byte{"corrupt": corrupt, "truncated": raw[:len(raw)*2/3]} {
		bad := filepath.Join(t.TempDir(), name+".snap")
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		res := c.admin("snapshot", "restore", bad)
		if res.code == 0 || !strings.Contains(res.stderr, "not a usable snapshot file") {
			t.Fatalf("snapshot restore of a %s file:\n%s\nwant refused as not a usable snapshot file", name, res)
		}
		if res := runBin(t, nil, "snapshot", "inspect", bad); res.code == 0 {
			t.Fatalf("snapshot inspect of a %s file:\n%s\nwant refused", name, res)
		}
		for _, nd := range c.nodes {
			r := testutil.Send(t, testutil.Call{Method: http.MethodPut, URL: nd.url + "/v1/snapshot", Auth: testutil.Bearer(c.tokens.Admin),
				Body: string(data), ContentType: wire.SnapshotContentType, Client: e2eClient})
			testutil.WantError(t, "PUT /v1/snapshot of a "+name+" file through "+nd.id, r, http.StatusBadRequest, wire.CodeInvalidSnapshot)
		}
	}
	if after := c.waitConverged(0, 10*time.Second); after.StateHash != before.StateHash || after.AppliedIndex != before.AppliedIndex {
		t.Fatalf("state after refused restores: index %d hash %s, want index %d hash %s", after.AppliedIndex, after.StateHash, before.AppliedIndex, before.StateHash)
	}

	restore := c.admin("snapshot", "restore", "--json", file)
	if restore.code != 0 {
		t.Fatalf("snapshot restore:\n%s", restore)
	}
	var res wire.RestoreResult
	if err := json.Unmarshal([]byte(restore.stdout), &res); err != nil {
		t.Fatalf("snapshot restore --json: %v\n%s", err, restore.stdout)
	}
	t.Logf("restore took %d ms on the leader (%s with the command)", res.TookMs, restore.took.Round(time.Millisecond))
	if res.Holder != freshClaim.Holder || res.Generation < freshClaim.Generation || res.Index <= backupHeader.Index {
		t.Fatalf("restore = %+v, want the fresh leader %s's claim at generation ≥ %d and an index above the backup's %d", res, freshClaim.Holder, freshClaim.Generation, backupHeader.Index)
	}
	st := c.waitConverged(res.Index, 15*time.Second)
	claimedAt := st.Primary.ClaimedAt
	if st.Primary.Holder != res.Holder || st.Primary.Generation != res.Generation || st.Primary.Index != res.Index {
		t.Fatalf("the claim after the restore = %+v, want %s at generation %d, index %d", st.Primary, res.Holder, res.Generation, res.Index)
	}
	rebased := func(expiresAt int64) int64 {
		if remaining := expiresAt - backupHeader.LastNow; remaining > 0 {
			return claimedAt + remaining + e2eGraceMs
		}
		return claimedAt
	}

	// The state is the backup's, rebased by the claim's rule: the document
	// a second save gets is the one Rebase makes of the backup with the
	// restored claim's figures.
	second := filepath.Join(t.TempDir(), "after.snap")
	if r := c.admin("snapshot", "save", second); r.code != 0 {
		t.Fatalf("snapshot save after the restore:\n%s", r)
	}
	_, afterDoc := snapshotDocument(t, second)
	var afterCands struct {
		Candidates []fsm.Candidate `json:"candidates"`
	}
	if err := json.Unmarshal(afterDoc, &afterCands); err != nil {
		t.Fatal(err)
	}
	b, err := fsm.ReadBackup(bytes.NewReader(backupDoc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.Rebase(fsm.RestoreParams{Holder: res.Holder, Term: res.Generation, Now: claimedAt, GraceMs: e2eGraceMs,
		Index: res.Index, Format: res.FormatLevel, Candidates: afterCands.Candidates})
	if err != nil {
		t.Fatal(err)
	}
	if got, wantDoc := withoutTime(t, afterDoc), withoutTime(t, want); !reflect.DeepEqual(got, wantDoc) {
		t.Fatalf("the restored state is not the backup rebased:\ngot  %s\nwant %s", afterDoc, want)
	}

	for _, nd := range c.nodes {
		got := listConsistent[[]wire.Resource](t, c, nd, "/v1/resources")
		if len(got) != len(savedResources) {
			t.Fatalf("%s holds %d resources after the restore, want %d", nd.id, len(got), len(savedResources))
		}
		for i, r := range got {
			w := savedResources[i]
			if r.ExpiresAt != rebased(w.ExpiresAt) || r.ExpiresAt < claimedAt+w.ExpiresAt-backupHeader.LastNow {
				t.Errorf("%s: %s expires at %d, want %d: its remaining TTL %d ms plus the grace from the restore", nd.id, r.ID, r.ExpiresAt, rebased(w.ExpiresAt), w.ExpiresAt-backupHeader.LastNow)
			}
			r.ExpiresAt, w.ExpiresAt = 0, 0
			if !reflect.DeepEqual(r, w) {
				t.Errorf("%s: resource after the restore = %+v, want %+v", nd.id, r, w)
			}
		}
		gotLeases := listConsistent[[]wire.PortLease](t, c, nd, "/v1/leases/port")
		if len(gotLeases) != len(leases) {
			t.Fatalf("%s holds %d leases after the restore, want %d", nd.id, len(gotLeases), len(leases))
		}
		for i, l := range gotLeases {
			w := leases[i]
			if l.ExpiresAt != rebased(w.ExpiresAt) {
				t.Errorf("%s: lease on port %d expires at %d, want %d", nd.id, l.Port, l.ExpiresAt, rebased(w.ExpiresAt))
			}
			if l.ID != w.ID || l.LeaseID != w.LeaseID || l.Fence != w.Fence || l.Generation != w.Generation || l.Owner != w.Owner {
				t.Errorf("%s: lease after the restore = %+v, want id %s lease id %s fence %d generation %d", nd.id, l, w.ID, w.LeaseID, w.Fence, w.Generation)
			}
		}
	}
	// The backup's machine token works, its owner renews its lease, and a
	// new grant's fence is above every restored one.
	testutil.Expect(t, e2eCall(http.MethodPost, fresh.url+"/v1/resources/"+member.EscapeID("machine:saved-0")+"/heartbeat", machineToken, nil), http.StatusOK)
	testutil.Expect(t, testutil.Call{Method: http.MethodPost, URL: fmt.Sprintf("%s/v1/leases/port/%d/heartbeat", fresh.url, leases[0].Port),
		Auth: testutil.Bearer(c.tokens.Member), Header: map[string]string{wire.HeaderPortLeaseID: leases[0].LeaseID}, Client: e2eClient}, http.StatusOK)
	if l := c.acquire(a, fresh, "after the restore"); l.Fence <= res.Index {
		t.Errorf("a lease granted after the restore has fence %d, want above %d", l.Fence, res.Index)
	}
	c.checkLogs(c.nodes[0].proc, c.nodes[1].proc, c.nodes[2].proc)
}

// TestE2E_LeaderTransfer: after `leader transfer --to M`, M leads — its
// claim applied, /v1/primary on M naming it — within 1 s of the command's
// start, the command's own process start included.
func TestE2E_LeaderTransfer(t *testing.T) {
	c := newE2ECluster(t, 3)
	leader, p := c.startAll()
	gen := p.Generation
	for round := range 4 {
		var target *e2eNode
		for i, nd := range c.nodes {
			if nd == leader {
				target = c.nodes[(i+1+round%2)%3]
			}
		}
		start := time.Now()
		r := c.admin("leader", "transfer", "--to", target.id, "--json")
		if r.code != 0 {
			t.Fatalf("leader transfer --to %s:\n%s", target.id, r)
		}
		var res wire.TransferResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("leader transfer --json: %v\n%s", err, r.stdout)
		}
		pr, err := getPrimary(target.url)
		took := time.Since(start)
		if err != nil || !pr.Known || pr.Holder != target.id || pr.Generation <= gen || res.Holder != target.id || res.From != leader.id {
			t.Fatalf("after leader transfer --to %s (%+v): /v1/primary on %s = %+v, %v", target.id, res, target.id, pr, err)
		}
		t.Logf("leader transfer %s → %s: %d ms on the leader, %s with the command", leader.id, target.id, res.TookMs, took.Round(time.Millisecond))
		// The contract is 1 s on the leader's own clock (the answer's tookMs);
		// the command as a whole (a process start, a dial) gets a generous margin.
		if res.TookMs > 1000 || took > 5*time.Second {
			t.Errorf("%s led %d ms after the leader began (want within 1 s), %s after the command started (want within 5 s)", target.id, res.TookMs, took.Round(time.Millisecond))
		}
		leader, gen = target, pr.Generation
	}
	// Asking for the leader itself changes nothing.
	r := c.admin("leader", "transfer", "--to", leader.id)
	if r.code != 0 || !strings.Contains(r.stdout, "already leads") {
		t.Fatalf("leader transfer --to the leader:\n%s", r)
	}
	if pr, err := getPrimary(leader.url); err != nil || pr.Generation != gen {
		t.Fatalf("/v1/primary after a transfer to the leader itself = %+v, %v; want generation %d unchanged", pr, err, gen)
	}
}

// TestE2E_StatusCheckExitCodes: `status --check` exits 0 with every node up,
// 1 with one node down (saying it is unreachable and the quorum at risk) and
// 2 with two down (no leader).
func TestE2E_StatusCheckExitCodes(t *testing.T) {
	c := newE2ECluster(t, 3)
	leader, _ := c.startAll()
	check := func(args ...string) cliResult {
		return c.client(c.tokens.Query, append([]string{"status", "--check"}, args...)...)
	}
	waitCode := func(want int, timeout time.Duration) cliResult {
		t.Helper()
		var last cliResult
		testutil.Poll(t, fmt.Sprintf("status --check to exit %d", want), timeout, func() error {
			last = check()
			if last.code != want {
				return fmt.Errorf("exit %d:\n%s", last.code, last.stdout)
			}
			return nil
		})
		return last
	}
	r := waitCode(exitHealthy, 10*time.Second)
	if !strings.Contains(r.stdout, "health: healthy (exit 0)") || !strings.Contains(r.stdout, "failure tolerance 1") || !strings.Contains(r.stdout, "state hashes: ") {
		t.Errorf("status --check with every node up:\n%s", r.stdout)
	}
	t.Logf("status --check, all up:\n%s", r.stdout)
	js := check("--json")
	var report statusReport
	if err := json.Unmarshal([]byte(js.stdout), &report); err != nil || report.Health == nil || js.code != 0 {
		t.Fatalf("status --check --json: %v\n%s", err, js)
	}
	if h := report.Health; h.Status != "healthy" || h.Voters != 3 || h.HealthyVoters != 3 || h.FailureTolerance != 1 || h.Leader != leader.id || len(h.Nodes) != 3 {
		t.Errorf("status --check --json health = %+v", *h)
	}
	for _, n := range report.Health.Nodes {
		if n.Version == "" || n.Lag < 0 {
			t.Errorf("status --check --json node %+v, want its version and lag", n)
		}
	}

	var down []*e2eNode
	for _, nd := range c.nodes {
		if nd != leader {
			down = append(down, nd)
		}
	}
	down[0].proc.kill(t)
	r = waitCode(exitDegraded, 10*time.Second)
	if !strings.Contains(r.stdout, down[0].id+" "+down[0].url+": unreachable") || !strings.Contains(r.stdout, "quorum at risk") {
		t.Errorf("status --check with %s down:\n%s", down[0].id, r.stdout)
	}
	if !strings.Contains(r.stderr, "degraded") {
		t.Errorf("status --check with one node down: stderr %q, want the verdict", r.stderr)
	}
	t.Logf("status --check, %s down:\n%s", down[0].id, r.stdout)

	down[1].proc.kill(t)
	r = waitCode(exitNoLeader, 15*time.Second)
	if !strings.Contains(r.stdout, "no leader") {
		t.Errorf("status --check with two nodes down:\n%s", r.stdout)
	}
	t.Logf("status --check, two down:\n%s", r.stdout)

	// No token: the check cannot run.
	if r := runBin(t, nil, "status", "--check", "--candidates", c.cliCandidates()); r.code != exitUnknown {
		t.Errorf("status --check without a token: exit %d, want %d\n%s", r.code, exitUnknown, r)
	}
}

// TestE2E_RollingRestartUnderLoad restarts every node in turn with the
// docs/operations.md's procedure — move leadership away if it leads, stop, start, wait
// until ready and the cluster healthy, next — while four clients write
// through the cluster as members do (a client retries once after a 503 or a
// connection error). No write fails beyond that one retry, and every
// acknowledged write is there at the end.
func TestE2E_RollingRestartUnderLoad(t *testing.T) {
	c := newE2ECluster(t, 3)
	c.startAll()
	a := newAckedWrites()
	var writers []*loadWriter
	for i := range 4 {
		writers = append(writers, c.startLoad(a, fmt.Sprintf("w%d", i)))
	}
	a.waitMore(t, "before the restarts", 50, 15*time.Second)
	health := func() cliResult {
		return c.client(c.tokens.Query, "status", "--check")
	}
	start := time.Now()
	for _, nd := range c.nodes {
		step := time.Now()
		st, err := c.getStatus(nd)
		if err != nil {
			t.Fatalf("status of %s: %v", nd.id, err)
		}
		if st.State == "Leader" {
			if r := c.admin("leader", "transfer"); r.code != 0 {
				t.Fatalf("leader transfer away from %s:\n%s", nd.id, r)
			} else {
				t.Logf("%s", strings.TrimSpace(r.stdout))
			}
		}
		nd.proc.stop(t, 10*time.Second)
		c.start(nd)
		testutil.Poll(t, nd.id+" ready (health --ready)", 20*time.Second, func() error {
			if r := runBin(t, nil, "health", "--ready", "--url", nd.url); r.code != 0 {
				return fmt.Errorf("%s", r.stderr)
			}
			return nil
		})
		testutil.Poll(t, "status --check healthy after restarting "+nd.id, 20*time.Second, func() error {
			if r := health(); r.code != 0 {
				return fmt.Errorf("%s", r.stdout)
			}
			return nil
		})
		a.waitMore(t, "after restarting "+nd.id, 50, 15*time.Second)
		t.Logf("restarted %s in %s", nd.id, time.Since(step).Round(time.Millisecond))
	}
	t.Logf("rolling restart of 3 nodes in %s", time.Since(start).Round(time.Millisecond))
	for i, w := range writers {
		w.halt()
		w.rc.mu.Lock()
		t.Logf("writer %d: %d writes, %d retried once, %d failed", i, w.rc.ops, w.rc.retries, w.rc.failures)
		if w.rc.failures > 0 {
			t.Errorf("writer %d: %d writes failed after their one retry: %q", i, w.rc.failures, w.rc.errs)
		}
		w.rc.mu.Unlock()
	}
	leader, _ := c.waitPrimary(nil, 0, 10*time.Second)
	c.checkAcked(a, leader, 10*time.Second)
	for _, nd := range c.nodes {
		c.checkLogs(nd.proc)
	}
}

// TestE2E_OpsOverTLS runs the operations on a cluster with HTTPS and mutual
// TLS Raft: a snapshot saved and restored through a follower (the body
// streamed to the leader over the verified forwarding client), a
// leadership transfer and `status --check` with --ca-file.
func TestE2E_OpsOverTLS(t *testing.T) {
	c := buildE2ECluster(t, 3, true)
	leader, _ := c.startAll()
	follower := c.running(leader)[0]
	a := newAckedWrites()
	c.register(a, leader, "machine:tls-saved")
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.url + "/v1/snapshot", Auth: testutil.Bearer(c.tokens.Admin), Client: e2eClient})
	testutil.WantStatus(t, "GET /v1/snapshot through a follower over TLS", r, http.StatusOK)
	h, err := wire.ReadSnapshotHeader(bufio.NewReader(bytes.NewReader(r.Body)))
	if err != nil || h.Counts.Resources != 1 || int64(len(r.Body)) != int64(len(h.Line()))+h.Size {
		t.Fatalf("snapshot through a follower over TLS: header %+v, %v; %d bytes", h, err, len(r.Body))
	}
	c.register(a, leader, "machine:tls-after")
	r = testutil.Send(t, testutil.Call{Method: http.MethodPut, URL: follower.url + "/v1/snapshot", Auth: testutil.Bearer(c.tokens.Admin),
		Body: string(r.Body), ContentType: wire.SnapshotContentType, Client: e2eClient})
	testutil.WantStatus(t, "PUT /v1/snapshot through a follower over TLS", r, http.StatusOK)
	if _, err := c.getResource(follower, "machine:tls-after"); err == nil {
		t.Errorf("%s still serves machine:tls-after after the restore", follower.id)
	}
	if _, err := c.getResource(follower, "machine:tls-saved"); err != nil {
		t.Errorf("%s after the restore: %v", follower.id, err)
	}
	if res := c.admin("leader", "transfer", "--to", follower.id); res.code != 0 {
		t.Fatalf("leader transfer over TLS:\n%s", res)
	}
	// Healthy once every node has applied the new leader's claim (a node
	// that has not is "not ready" for that instant, and status --check says
	// so).
	testutil.Poll(t, "status --check healthy over TLS after the transfer", 10*time.Second, func() error {
		if res := c.client(c.tokens.Query, "status", "--check"); res.code != 0 {
			return fmt.Errorf("%s", res)
		}
		return nil
	})
	file := filepath.Join(t.TempDir(), "tls.snap")
	if res := c.admin("snapshot", "save", file); res.code != 0 {
		t.Fatalf("snapshot save over TLS:\n%s", res)
	}
}
