package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// clusterOptions runs the in-memory clusters at the production raft timeouts
// (500 ms, a 250 ms leader lease), which a loaded machine under -race keeps:
// a leadership lost in the middle of a test would answer a fixture write 503
// outcome-unknown.
func clusterOptions() apitest.Options {
	return apitest.Options{Timeout: 500 * time.Millisecond}
}

// registries are the metric registries of a test cluster's nodes, by node
// index.
type registries []*prometheus.Registry

// metric returns the value of the counter or gauge name with the given label
// pairs (name, value, …) in node i's registry, 0 when it has no such series.
func (r registries) metric(t testing.TB, i int, name string, labels ...string) float64 {
	t.Helper()
	families, err := r[i].Gather()
	if err != nil {
		t.Fatalf("gather metrics of node %d: %v", i, err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k := 0; k+1 < len(labels); k += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[k] && lp.GetValue() == labels[k+1]
				}
				if !found {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// fingerprint is the owner the server stamps for a token: the first 16 hex
// characters of its SHA-256.
func fingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// issueToken issues a machine token through url with the admin token.
func issueToken(t testing.TB, c *apitest.Cluster, url, machine string) wire.IssuedToken {
	t.Helper()
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: machine}))
	testutil.WantStatus(t, "POST /v1/tokens/member", r, http.StatusCreated)
	return testutil.Decode[wire.IssuedToken](t, r)
}

// acquire acquires a lease through url and returns it.
func acquire(t testing.TB, url, token string, req wire.AcquireRequest) wire.PortLease {
	t.Helper()
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, url+"/v1/leases/port", token, req))
	testutil.WantStatus(t, "POST /v1/leases/port", r, http.StatusCreated)
	return testutil.Decode[wire.PortLease](t, r)
}

// leaseCall is a lease heartbeat or release exactly as port-lease-heartbeat.ts
// sends it: no body, no content type, the lease id in x-port-lease-id.
func leaseCall(method, url string, port int, token, leaseID string) testutil.Call {
	path := url + "/v1/leases/port/" + strconv.Itoa(port)
	if method == http.MethodPost {
		path += "/heartbeat"
	}
	c := testutil.Call{Method: method, URL: path, Auth: testutil.Bearer(token)}
	if leaseID != "" {
		c = c.WithHeader(wire.HeaderPortLeaseID, leaseID)
	}
	return c
}

// releaseAll releases every lease the leader holds, with the admin token.
func releaseAll(t testing.TB, c *apitest.Cluster) {
	t.Helper()
	leader := c.Nodes[c.Leader()]
	for _, l := range leader.Node.FSM().Leases() {
		r := testutil.Send(t, leaseCall(http.MethodDelete, leader.URL, l.Port, c.Tokens.Admin, l.LeaseID))
		if r.Status != http.StatusNoContent && r.Status != http.StatusNotFound {
			t.Fatalf("release port %d: %s", l.Port, r)
		}
	}
}

// headerUint parses a numeric read header.
func headerUint(t testing.TB, r testutil.Reply, name string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(r.Header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, r.Header.Get(name), err)
	}
	return v
}
