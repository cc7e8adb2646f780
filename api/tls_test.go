package api_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/internal/testutil"
)

// plainClient is a client without TLS settings.
var plainClient = testutil.NewClient(10*time.Second, true)

func tlsOptions() apitest.Options {
	o := clusterOptions()
	o.TLS = true
	return o
}

// tlsDo sends one request with client and reads the answer.
func tlsDo(t *testing.T, client *http.Client, method, url, token, body string) (int, []byte, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

const acquireJSON = `{"machine":"mbp","purpose":"web","ttlMs":60000}`

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
	status, body, err := tlsDo(t, client, http.MethodPost, f.URL+"/v1/leases/port", c.Tokens.Member, acquireJSON)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("acquire through follower %s = %d %s, %v; want 201", f.Machine, status, body, err)
	}
	leader := c.Nodes[c.Leader()]
	if got := len(leader.Node.FSM().Leases()); got != 1 {
		t.Errorf("leader holds %d leases, want 1", got)
	}

	untrusting := &http.Client{Transport: &http.Transport{Proxy: nil}}
	if _, _, err := tlsDo(t, untrusting, http.MethodGet, f.URL+"/v1/primary", "", ""); err == nil {
		t.Error("GET /v1/primary with a client that does not trust the CA: error = nil, want a verification failure")
	}
	plainURL := "http://" + strings.TrimPrefix(f.URL, "https://")
	status, _, err = tlsDo(t, plainClient, http.MethodGet, plainURL+"/v1/primary", "", "")
	if err == nil && status == http.StatusOK {
		t.Errorf("plaintext GET /v1/primary = %d, want a refusal", status)
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
	status, body, err := tlsDo(t, other.HTTPClient(""), http.MethodPost, "https://"+ln.Addr().String()+"/v1/leases/port", c.Tokens.Member, acquireJSON)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(wire.CodeNoLeader)) {
		t.Errorf("acquire through a follower that cannot verify the leader = %d %s, want 503 %s", status, body, wire.CodeNoLeader)
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
	if _, _, err := tlsDo(t, c.PKI.HTTPClient(""), http.MethodGet, url+"/v1/primary", "", ""); err == nil {
		t.Error("GET /v1/primary without a client certificate: error = nil, want a refused handshake")
	}
	foreign := apitest.NewPKI(t)
	withForeign := foreign.HTTPClient("mbp")
	withForeign.Transport.(*http.Transport).TLSClientConfig.RootCAs = c.PKI.HTTPClient("").Transport.(*http.Transport).TLSClientConfig.RootCAs
	if _, _, err := tlsDo(t, withForeign, http.MethodGet, url+"/v1/primary", "", ""); err == nil {
		t.Error("GET /v1/primary with a certificate of another CA: error = nil, want a refused handshake")
	}
	client := c.PKI.HTTPClient("mbp")
	if status, body, err := tlsDo(t, client, http.MethodGet, url+"/v1/primary", "", ""); err != nil || status != http.StatusOK {
		t.Errorf("GET /v1/primary with a client certificate = %d %s, %v; want 200", status, body, err)
	}
	// The certificate does not replace the token.
	if status, _, err := tlsDo(t, client, http.MethodGet, url+"/v1/leases/port", "", ""); err != nil || status != http.StatusUnauthorized {
		t.Errorf("GET /v1/leases/port with a certificate and no token = %d, %v; want 401", status, err)
	}
	// A follower forwards with its own certificate.
	if status, body, err := tlsDo(t, client, http.MethodPost, url+"/v1/leases/port", c.Tokens.Member, acquireJSON); err != nil || status != http.StatusCreated {
		t.Errorf("acquire through a follower = %d %s, %v; want 201", status, body, err)
	}
}

// SetTokens swaps the cluster tokens: the old ones stop working at once and
// the new ones work, with no restart.
func TestServer_SetTokens(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	url := c.Nodes[c.Leader()].URL + "/v1/tokens/member"
	if status, _, _ := tlsDo(t, plainClient, http.MethodGet, url, c.Tokens.Admin, ""); status != http.StatusOK {
		t.Fatalf("GET with the admin token = %d, want 200", status)
	}
	fresh := wire.TokensFile{Admin: strings.Repeat("1", 64), Member: strings.Repeat("2", 64), Query: strings.Repeat("3", 64)}
	for _, n := range c.Nodes {
		n.Server.SetTokens(fresh)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{c.Tokens.Admin, http.StatusUnauthorized}, {fresh.Admin, http.StatusOK}, {fresh.Query, http.StatusForbidden}} {
		status, body, err := tlsDo(t, plainClient, http.MethodGet, url, tc.token, "")
		if err != nil || status != tc.want {
			t.Errorf("GET %s with token %.8s… = %d %s, %v; want %d", url, tc.token, status, body, err, tc.want)
		}
	}
}
