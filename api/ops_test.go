package api_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// loggedCluster is a cluster whose nodes log JSON lines into buffers, with
// a version the test can see in their status.
type loggedCluster struct {
	*apitest.Cluster
	logs []*testutil.SyncBuffer
}

func startLogged(t *testing.T, opts apitest.Options) *loggedCluster {
	t.Helper()
	lc := &loggedCluster{}
	opts.API = func(i int, d *api.Deps) {
		for len(lc.logs) <= i {
			lc.logs = append(lc.logs, &testutil.SyncBuffer{})
		}
		d.Logger = slog.New(slog.NewJSONHandler(lc.logs[i], nil))
		d.Version = "9.9.9-test"
	}
	lc.Cluster = apitest.Start(t, opts)
	return lc
}

// auditLines returns every node's audit lines of action.
func (lc *loggedCluster) auditLines(t *testing.T, action string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range lc.logs {
		for _, line := range strings.Split(l.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["audit"] == true && m["action"] == action {
				out = append(out, m)
			}
		}
	}
	return out
}

// snapshotFile splits a snapshot file and checks its layout: the header
// line, then exactly size bytes whose SHA-256 is the header's.
func snapshotFile(t *testing.T, data []byte) (wire.SnapshotHeader, []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(data))
	h, err := wire.ReadSnapshotHeader(br)
	if err != nil {
		t.Fatalf("ReadSnapshotHeader() error = %v", err)
	}
	doc := data[len(h.Line()):]
	if int64(len(doc)) != h.Size {
		t.Fatalf("the document has %d bytes, the header says %d", len(doc), h.Size)
	}
	if sum := sha256.Sum256(doc); hex.EncodeToString(sum[:]) != h.SHA256 {
		t.Fatalf("the document's SHA-256 is not the header's")
	}
	return h, doc
}

func saveSnapshot(t *testing.T, url, token string) (wire.SnapshotHeader, []byte, []byte) {
	t.Helper()
	r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: url + "/v1/snapshot", Auth: testutil.Bearer(token)})
	testutil.WantStatus(t, "GET /v1/snapshot", r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != wire.SnapshotContentType {
		t.Errorf("GET /v1/snapshot Content-Type = %q, want %q", ct, wire.SnapshotContentType)
	}
	h, doc := snapshotFile(t, r.Body)
	return h, doc, r.Body
}

func putSnapshot(url, token string, file []byte) testutil.Call {
	return testutil.Call{Method: http.MethodPut, URL: url + "/v1/snapshot", Auth: testutil.Bearer(token), Body: string(file), ContentType: wire.SnapshotContentType}
}

// Save through a follower, change the state, restore through another
// follower: every node holds the saved records again, the answering
// follower at once (it answers once it installed the restore), and the
// claim is the current leader's. Both actions are in the audit log with the
// admin token's fingerprint and never the token.
func TestServer_SnapshotSaveAndRestore(t *testing.T) {
	lc := startLogged(t, clusterOptions())
	c := lc.Cluster
	li := c.Leader()
	leader := c.Nodes[li]
	f1, f2 := c.Nodes[(li+1)%3], c.Nodes[(li+2)%3]
	member, admin := c.Tokens.Member, c.Tokens.Admin

	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/register", member, registerBody(nil)))
	testutil.WantStatus(t, "register", r, http.StatusOK)
	lease := acquire(t, leader.URL, member, wire.AcquireRequest{Machine: "snap", Purpose: "backup", TTLMs: memberTTL})
	issueToken(t, c, leader.URL, "snap")

	h, doc, file := saveSnapshot(t, f1.URL, admin)
	want := leader.Node.FSM().Counts()
	if h.Counts.Resources != want.Resources || h.Counts.Leases != 1 || h.Counts.Tokens != 1 || h.FormatLevel != fsm.MaxFormat || h.Version != "9.9.9-test" {
		t.Fatalf("snapshot header = %+v, want counts %+v at format %d by version 9.9.9-test", h, want, fsm.MaxFormat)
	}
	if h.Index == 0 || h.Term == 0 || h.Generation == 0 || h.Holder != leader.Machine {
		t.Fatalf("snapshot header = %+v, want the index, term and generation of %s", h, leader.Machine)
	}
	b, err := fsm.ReadBackup(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("the saved document does not read back: %v", err)
	}
	if b.Applied() != h.Index {
		t.Errorf("document applied index %d, header index %d", b.Applied(), h.Index)
	}

	// Changes after the save.
	testutil.Expect(t, leaseCall(http.MethodDelete, leader.URL, lease.Port, member, lease.LeaseID), http.StatusNoContent)
	other := acquire(t, leader.URL, member, wire.AcquireRequest{Machine: "later", Purpose: "after the save", TTLMs: memberTTL})
	genBefore := leader.Node.FSM().Primary().Generation

	r = testutil.Send(t, putSnapshot(f2.URL, admin, file))
	testutil.WantStatus(t, "PUT /v1/snapshot", r, http.StatusOK)
	res := testutil.Decode[wire.RestoreResult](t, r)
	if res.Generation < genBefore || res.Holder != leader.Machine || res.Index <= h.Index || res.Backup != h {
		t.Fatalf("PUT /v1/snapshot = %+v, want %s's claim at generation ≥ %d, an index above %d, the backup's header", res, leader.Machine, genBefore, h.Index)
	}
	if got := headerUint(t, r, wire.HeaderIndex); got != res.Index {
		t.Errorf("X-Elanous-Index = %d, want %d", got, res.Index)
	}
	// The follower that answered holds the restored state already.
	r = testutil.Expect(t, testutil.JSONCall(http.MethodGet, f2.URL+"/v1/leases/port", c.Tokens.Query, nil), http.StatusOK)
	leases := testutil.Decode[[]wire.PortLease](t, r)
	if len(leases) != 1 || leases[0].LeaseID != lease.LeaseID || leases[0].Fence != lease.Fence || leases[0].Port != lease.Port {
		t.Fatalf("leases on %s after the restore = %+v, want only %s (fence %d), not %s", f2.Machine, leases, lease.LeaseID, lease.Fence, other.LeaseID)
	}
	c.WaitFor("every node at the restored state", 10*time.Second, func() bool {
		hash := ""
		for _, n := range c.Nodes {
			applied, h := n.Node.FSM().AppliedHash()
			if applied < res.Index || (hash != "" && h != hash) {
				return false
			}
			hash = h
		}
		return true
	})
	// The restored lease is renewed by its owner, as before.
	testutil.Expect(t, leaseCall(http.MethodPost, f1.URL, lease.Port, member, lease.LeaseID), http.StatusOK)

	for _, action := range []string{"snapshot.save", "snapshot.restore"} {
		lines := lc.auditLines(t, action)
		if len(lines) != 1 {
			t.Fatalf("audit lines of %s = %v, want one (where the handler ran)", action, lines)
		}
		l := lines[0]
		if l["outcome"] != "ok" || l["token"] != fingerprint(admin) || l["via"] == nil || l["remote"] == "" {
			t.Errorf("audit line of %s = %v, want outcome ok, the admin fingerprint, via the follower, a remote address", action, l)
		}
	}
	for i, l := range lc.logs {
		if strings.Contains(l.String(), admin) {
			t.Errorf("%s logged the admin token", c.Nodes[i].Machine)
		}
	}
}

// A file that is not a whole, checked snapshot file is refused with 400
// invalid-snapshot (413 when too large), through the leader and through a
// follower, and nothing changes anywhere.
func TestServer_SnapshotRestoreRefusesBadFiles(t *testing.T) {
	opts := clusterOptions()
	opts.Sweep = time.Hour
	c := apitest.Start(t, opts)
	leader := c.Nodes[c.Leader()]
	admin := c.Tokens.Admin
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/resources/register", c.Tokens.Member, registerBody(nil)))
	testutil.WantStatus(t, "register", r, http.StatusOK)
	h, doc, file := saveSnapshot(t, leader.URL, admin)
	c.WaitApplied()

	withHeader := func(edit func(*wire.SnapshotHeader)) []byte {
		h2 := h
		edit(&h2)
		return append(h2.Line(), doc...)
	}
	flipped := bytes.Clone(file)
	flipped[len(flipped)-10] ^= 0x01
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"empty", nil, 400, wire.CodeInvalidSnapshot},
		{"a JSON document that is not a snapshot file", []byte(`{"version":2,"resources":[]}` + "\n"), 400, wire.CodeInvalidSnapshot},
		{"the bare document", doc, 400, wire.CodeInvalidSnapshot},
		{"the header only", h.Line(), 400, wire.CodeInvalidSnapshot},
		{"the header cut short", h.Line()[:20], 400, wire.CodeInvalidSnapshot},
		{"truncated", file[:len(file)-len(doc)/2], 400, wire.CodeInvalidSnapshot},
		{"one bit flipped", flipped, 400, wire.CodeInvalidSnapshot},
		{"data after the document", append(bytes.Clone(file), "more"...), 400, wire.CodeInvalidSnapshot},
		{"another layout", withHeader(func(h *wire.SnapshotHeader) { h.Container = 2 }), 400, wire.CodeInvalidSnapshot},
		{"another kind", withHeader(func(h *wire.SnapshotHeader) { h.Kind = "etcd-snapshot" }), 400, wire.CodeInvalidSnapshot},
		{"a header that does not match the document", withHeader(func(h *wire.SnapshotHeader) { h.Counts.Resources++ }), 400, wire.CodeInvalidSnapshot},
		{"a size beyond the file", withHeader(func(h *wire.SnapshotHeader) { h.Size += 5 }), 400, wire.CodeInvalidSnapshot},
		{"a checksum of other bytes", withHeader(func(h *wire.SnapshotHeader) { h.SHA256 = strings.Repeat("0", 64) }), 400, wire.CodeInvalidSnapshot},
	}
	for _, target := range []*apitest.Node{leader, c.Nodes[c.Follower()]} {
		for _, tc := range cases {
			t.Run(target.Machine+"/"+tc.name, func(t *testing.T) {
				before := snapshotState(c)
				r := testutil.Send(t, putSnapshot(target.URL, admin, tc.body))
				testutil.WantError(t, tc.name, r, tc.status, tc.code)
				after := snapshotState(c)
				if after.lastIndex != before.lastIndex || strings.Join(after.hashes, ",") != strings.Join(before.hashes, ",") {
					t.Fatalf("%s: state moved (last index %d → %d, hashes %v → %v)", tc.name, before.lastIndex, after.lastIndex, before.hashes, after.hashes)
				}
			})
		}
	}
	t.Run("a declared length over the limit", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPut, leader.URL+"/v1/snapshot", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		req.ContentLength = wire.MaxSnapshotBytes + 1
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("PUT of %d bytes: status %d, want 413", req.ContentLength, resp.StatusCode)
			}
		}
		// An error is the server closing the connection after its 413
		// while the client still sends: refused either way.
	})
}

// The operations routes are the admin's: other tokens get 403, none 401.
func TestServer_OpsRoutesNeedAdmin(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	url := c.Nodes[c.Follower()].URL
	for _, call := range []testutil.Call{
		{Method: http.MethodGet, URL: url + "/v1/snapshot"},
		{Method: http.MethodPut, URL: url + "/v1/snapshot", Body: "x"},
		{Method: http.MethodPost, URL: url + "/v1/cluster/leader/transfer", Body: "{}", ContentType: "application/json"},
	} {
		for _, tok := range []struct {
			token  string
			status int
		}{{"", 401}, {c.Tokens.Query, 403}, {c.Tokens.Member, 403}} {
			call.Auth = testutil.Bearer(tok.token)
			r := testutil.Send(t, call)
			testutil.WantError(t, call.Method+" "+call.URL, r, tok.status, "")
		}
	}
}

// A transfer asked of a follower is forwarded; the answer comes once the new
// leader's claim is applied on the follower that answers, whose /v1/primary
// then names the new leader.
func TestServer_LeaderTransfer(t *testing.T) {
	lc := startLogged(t, clusterOptions())
	c := lc.Cluster
	li := c.Leader()
	via, target := c.Nodes[(li+1)%3], c.Nodes[(li+2)%3]
	call := func(body string) testutil.Reply {
		return testutil.Send(t, testutil.Call{Method: http.MethodPost, URL: via.URL + "/v1/cluster/leader/transfer",
			Auth: testutil.Bearer(c.Tokens.Admin), Body: body, ContentType: "application/json"})
	}
	for _, bad := range []struct{ name, body string }{
		{"unknown field", `{"machine":"x"}`},
		{"not a candidate name", `{"to":"Node A"}`},
		{"no such voter", `{"to":"node-z"}`},
	} {
		testutil.WantError(t, bad.name, call(bad.body), http.StatusBadRequest, wire.CodeInvalidRequest)
	}

	r := call(`{"to":"` + target.Machine + `"}`)
	testutil.WantStatus(t, "transfer", r, http.StatusOK)
	res := testutil.Decode[wire.TransferResult](t, r)
	if res.From != c.Nodes[li].Machine || res.Holder != target.Machine {
		t.Fatalf("transfer = %+v, want from %s to %s", res, c.Nodes[li].Machine, target.Machine)
	}
	p, err := getPrimaryOf(via.URL)
	if err != nil || p.Holder != target.Machine || p.Generation != res.Generation {
		t.Fatalf("GET /v1/primary on %s after the transfer = %+v, %v; want %s at generation %d", via.Machine, p, err, target.Machine, res.Generation)
	}
	// No target: leadership leaves the current leader; an empty body is fine.
	r = call("")
	testutil.WantStatus(t, "transfer without a target", r, http.StatusOK)
	if res2 := testutil.Decode[wire.TransferResult](t, r); res2.Holder == target.Machine || res2.Generation <= res.Generation {
		t.Fatalf("transfer without a target = %+v, want another holder than %s", res2, target.Machine)
	}
	if n := len(lc.auditLines(t, "leader.transfer")); n != 5 {
		t.Errorf("%d audit lines of leader.transfer, want 5 (3 refused, 2 done)", n)
	}
}

func getPrimaryOf(url string) (wire.Primary, error) {
	r, err := testutil.DoExpect(testutil.Call{Method: http.MethodGet, URL: url + "/v1/primary"}, http.StatusOK)
	if err != nil {
		return wire.Primary{}, err
	}
	var p wire.Primary
	return p, json.Unmarshal(r.Body, &p)
}

// /v1/cluster/status reports the build's version and the cluster's format.
func TestServer_ClusterStatusVersion(t *testing.T) {
	lc := startLogged(t, clusterOptions())
	c := lc.Cluster
	for _, n := range c.Nodes {
		c.WaitFor(n.Machine+" at format "+strconv.Itoa(fsm.MaxFormat), 10*time.Second, func() bool { return n.Node.FSM().Format() == fsm.MaxFormat })
		r := testutil.Expect(t, testutil.JSONCall(http.MethodGet, n.URL+"/v1/cluster/status", c.Tokens.Query, nil), http.StatusOK)
		st := testutil.Decode[wire.ClusterStatus](t, r)
		if st.Version != "9.9.9-test" || st.Format != fsm.MaxFormat {
			t.Errorf("%s status version %q format %d, want 9.9.9-test and %d", n.Machine, st.Version, st.Format, fsm.MaxFormat)
		}
	}
}

// A snapshot save and restore sent to a follower, which streams them to the
// leader, are audited on the leader with the client's address, as every
// forwarded admin action is (TestServer_AuditLog), not the follower's.
func TestServer_ForwardedSnapshotAuditsTheClient(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	leader, follower := c.Nodes[c.Leader()], c.Nodes[c.Follower()]
	r := testutil.Expect(t, from("127.0.0.2", testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/snapshot",
		Auth: testutil.Bearer(c.Tokens.Admin)}), http.StatusOK)
	testutil.Expect(t, from("127.0.0.2", putSnapshot(follower.URL, c.Tokens.Admin, r.Body)), http.StatusOK)
	for _, action := range []string{"snapshot.save", "snapshot.restore"} {
		var lines []map[string]any
		for _, l := range c.audit.JSONLines(t) {
			if l["action"] == action {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("audit lines of %s = %v, want one", action, lines)
		}
		l := lines[0]
		if l["node"] != leader.Machine || l["via"] != follower.Machine || !strings.HasPrefix(fmt.Sprint(l["remote"]), "127.0.0.2:") {
			t.Errorf("audit line of %s = %v, want it on %s via %s from the client's 127.0.0.2", action, l, leader.Machine, follower.Machine)
		}
	}
}
