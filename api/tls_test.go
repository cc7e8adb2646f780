package api_test

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// plainClient is a client without TLS settings.
var plainClient = testutil.NewClient(10*time.Second, true)

func tlsOptions() apitest.Options {
	o := clusterOptions()
	o.TLS = true
	return o
}

// clientAcquire is an acquire sent to the node at base with client (which
// holds the TLS settings under test).
func clientAcquire(client *http.Client, base, token string) testutil.Call {
	cl := acquireCall(base, token, "", wire.AcquireRequest{Machine: "mbp", Purpose: "web", TTLMs: 60000})
	cl.Client = client
	return cl
}

// getCall is a GET of url sent with client, with token's bearer
// authorization ("" for none).
func getCall(client *http.Client, url, token string) testutil.Call {
	return testutil.Call{Method: http.MethodGet, URL: url, Auth: testutil.Bearer(token), Client: client}
}

// Over HTTPS a follower forwards a write to the leader, verifying the
// leader's certificate against the CA; a client that does not trust the CA
// and a plaintext client get nothing.
func TestServer_HTTPSForwardsToLeader(t *testing.T) {
	c := apitest.Start(t, tlsOptions())
	f := c.Nodes[c.Follower()]
	if !strings.HasPrefix(f.URL, "https://") {
		t.Fatalf("follower URL %s, want https", f.URL)
	}
	client := c.PKI.HTTPClient("")
	r, err := testutil.Do(clientAcquire(client, f.URL, c.Tokens.Member))
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("acquire through follower %s = %v, %v; want 201", f.Machine, r, err)
	}
	leader := c.Nodes[c.Leader()]
	if got := len(leader.Node.FSM().Leases()); got != 1 {
		t.Errorf("leader holds %d leases, want 1", got)
	}

	untrusting := &http.Client{Transport: &http.Transport{Proxy: nil}}
	if _, err := testutil.Do(getCall(untrusting, f.URL+"/v1/primary", "")); err == nil {
		t.Error("GET /v1/primary with a client that does not trust the CA: error = nil, want a verification failure")
	}
	plainURL := "http://" + strings.TrimPrefix(f.URL, "https://")
	r, err = testutil.Do(getCall(plainClient, plainURL+"/v1/primary", ""))
	if err == nil && r.Status == http.StatusOK {
		t.Errorf("plaintext GET /v1/primary = %d, want a refusal", r.Status)
	}
}

// The forwarding client verifies the leader against its own CA: a follower
// whose CA is another one never sends the request (nor its Authorization)
// to the leader and answers 503 no-leader.
func TestServer_ForwardRefusesUnverifiedLeader(t *testing.T) {
	c := apitest.Start(t, tlsOptions())
	fi := c.Follower()
	f := c.Nodes[fi]
	other := apitest.NewPKI(t)
	srv := api.New(api.Deps{Node: f.Node, Tokens: c.Tokens, TLS: other.Store(f.Machine)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = ln.Close() })

	before := len(c.Nodes[c.Leader()].Node.FSM().Leases())
	r, err := testutil.Do(clientAcquire(other.HTTPClient(""), "https://"+ln.Addr().String(), c.Tokens.Member))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte(wire.CodeNoLeader)) {
		t.Errorf("acquire through a follower that cannot verify the leader = %v, want 503 %s", r, wire.CodeNoLeader)
	}
	if got := len(c.Nodes[c.Leader()].Node.FSM().Leases()); got != before {
		t.Errorf("leader holds %d leases, want %d: the forward went through", got, before)
	}
}

// With verify_incoming_api the API needs a client certificate of the CA as
// well as a token.
func TestServer_VerifyClients(t *testing.T) {
	o := tlsOptions()
	o.VerifyClients = true
	c := apitest.Start(t, o)
	url := c.Nodes[c.Follower()].URL
	if _, err := testutil.Do(getCall(c.PKI.HTTPClient(""), url+"/v1/primary", "")); err == nil {
		t.Error("GET /v1/primary without a client certificate: error = nil, want a refused handshake")
	}
	foreign := apitest.NewPKI(t)
	withForeign := foreign.HTTPClient("mbp")
	withForeign.Transport.(*http.Transport).TLSClientConfig.RootCAs = c.PKI.HTTPClient("").Transport.(*http.Transport).TLSClientConfig.RootCAs
	if _, err := testutil.Do(getCall(withForeign, url+"/v1/primary", "")); err == nil {
		t.Error("GET /v1/primary with a certificate of another CA: error = nil, want a refused handshake")
	}
	client := c.PKI.HTTPClient("mbp")
	if r, err := testutil.Do(getCall(client, url+"/v1/primary", "")); err != nil || r.Status != http.StatusOK {
		t.Errorf("GET /v1/primary with a client certificate = %v, %v; want 200", r, err)
	}
	// The certificate does not replace the token.
	if r, err := testutil.Do(getCall(client, url+"/v1/leases/port", "")); err != nil || r.Status != http.StatusUnauthorized {
		t.Errorf("GET /v1/leases/port with a certificate and no token = %d, %v; want 401", r.Status, err)
	}
	// A follower forwards with its own certificate.
	if r, err := testutil.Do(clientAcquire(client, url, c.Tokens.Member)); err != nil || r.Status != http.StatusCreated {
		t.Errorf("acquire through a follower = %v, %v; want 201", r, err)
	}
}

// SetTokens swaps the cluster tokens: the old ones stop working at once and
// the new ones work, with no restart.
func TestServer_SetTokens(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	url := c.Nodes[c.Leader()].URL + "/v1/tokens/member"
	if r, err := testutil.Do(getCall(plainClient, url, c.Tokens.Admin)); err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET with the admin token = %v, %v; want 200", r, err)
	}
	fresh := wire.TokensFile{Admin: strings.Repeat("1", 64), Member: strings.Repeat("2", 64), Query: strings.Repeat("3", 64)}
	for _, n := range c.Nodes {
		n.Server.SetTokens(fresh)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{c.Tokens.Admin, http.StatusUnauthorized}, {fresh.Admin, http.StatusOK}, {fresh.Query, http.StatusForbidden}} {
		r, err := testutil.Do(getCall(plainClient, url, tc.token))
		if err != nil || r.Status != tc.want {
			t.Errorf("GET %s with token %.8s… = %v, %v; want %d", url, tc.token, r, err, tc.want)
		}
	}
}
