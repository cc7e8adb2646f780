package api_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/api/wire"
)

// httpClient is the tests' client: keep-alive, no redirects followed, a
// timeout above the longest blocking query the tests make.
var httpClient = &http.Client{
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// call is one HTTP request. Auth is the whole Authorization header value
// ("" sends none); Body is sent as is ("" sends no body and no content type
// unless ContentType is set).
type call struct {
	Method      string
	URL         string
	Auth        string
	Body        string
	ContentType string
	Header      map[string]string
	// Chunked hides the body's length, so it is sent chunked.
	Chunked bool
	// OnWrote, when set, is called once the request is written (httptrace).
	OnWrote func()
	// NoRetry turns off the retry of 503 no-leader / not-ready answers (for
	// tests of exactly those answers).
	NoRetry bool
}

// reply is what a call got back.
type reply struct {
	Status  int
	Header  http.Header
	Body    []byte
	Elapsed time.Duration
}

func (r reply) String() string {
	body := string(r.Body)
	if len(body) > 300 {
		body = body[:300] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, body)
}

func bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// clusterOptions are the apitest options of these tests: raft timeouts long
// enough that a loaded CI machine (2 cores, -race, other suites running) does
// not depose healthy leaders, short enough for quick elections.
func clusterOptions() apitest.Options {
	return apitest.Options{Timeout: 300 * time.Millisecond}
}

// send performs c and reads the whole answer. Like the member client, it
// retries (for up to 10 s) an answer of 503 no-leader or not-ready: by
// contract nothing was applied, so the retry is safe for every request. It
// never retries 503 outcome-unknown.
func send(t testing.TB, c call) reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := send1(t, c)
		if c.NoRetry || r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		var e wire.Error
		if json.Unmarshal(r.Body, &e) != nil || (e.Error != wire.CodeNoLeader && e.Error != wire.CodeNotReady) {
			return r
		}
		t.Logf("%s %s: %s; retrying", c.Method, c.URL, r)
		<-time.After(50 * time.Millisecond) // the client's back-off between retries
	}
}

func send1(t testing.TB, c call) reply {
	t.Helper()
	r, err := do(c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Method, c.URL, err)
	}
	return r
}

// do performs c once; safe to call from any goroutine.
func do(c call) (reply, error) {
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
		if c.Chunked {
			body = io.MultiReader(body) // an unknown length: Transfer-Encoding chunked
		}
	}
	req, err := http.NewRequest(c.Method, c.URL, body)
	if err != nil {
		return reply{}, err
	}
	if c.OnWrote != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { c.OnWrote() },
		}))
	}
	if c.Auth != "" {
		req.Header.Set("Authorization", c.Auth)
	}
	if c.ContentType != "" {
		req.Header.Set("Content-Type", c.ContentType)
	}
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("read body: %w", err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: data, Elapsed: time.Since(start)}, nil
}

// jsonCall is a call carrying v as a JSON body, as the TypeScript client sends it.
func jsonCall(method, url, token string, v any) call {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return call{Method: method, URL: url, Auth: bearer(token), Body: string(data), ContentType: "application/json"}
}

// decodeWire decodes a success body into T strictly: an unknown field or
// trailing data fails the test, proving the server speaks the api/wire types.
func decodeWire[T any](t testing.TB, r reply) T {
	t.Helper()
	var v T
	if err := strictUnmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
	return v
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// wantStatus fails the test unless r has status want.
func wantStatus(t testing.TB, what string, r reply, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status = %s, want %d", what, r, want)
	}
}

// checkErrorBody reports what is wrong with an error answer: it must be JSON
// {error, message} with a non-empty code (and, when code is set, that code);
// a 401 must carry WWW-Authenticate: Bearer; a 503 must carry Retry-After.
func checkErrorBody(r reply, code string) error {
	if r.Status < 400 {
		return fmt.Errorf("status %d is not an error", r.Status)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fmt.Errorf("Content-Type = %q, want application/json", r.Header.Get("Content-Type"))
	}
	var e wire.Error
	if err := strictUnmarshal(r.Body, &e); err != nil {
		return fmt.Errorf("error body %q is not {error, message}: %v", r.Body, err)
	}
	if e.Error == "" {
		return fmt.Errorf("error body %q has an empty code", r.Body)
	}
	if e.Message == "" {
		return fmt.Errorf("error body %q has an empty message", r.Body)
	}
	if code != "" && e.Error != code {
		return fmt.Errorf("error code = %q, want %q (body %s)", e.Error, code, r.Body)
	}
	if r.Status == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
		return fmt.Errorf("401 WWW-Authenticate = %q, want Bearer …", r.Header.Get("WWW-Authenticate"))
	}
	if r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		return fmt.Errorf("503 without Retry-After")
	}
	return nil
}

// wantError fails the test unless r is status with a well-formed error body of code.
func wantError(t testing.TB, what string, r reply, status int, code string) {
	t.Helper()
	wantStatus(t, what, r, status)
	if err := checkErrorBody(r, code); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// fingerprint is the owner the server stamps for a token: the first 16 hex
// characters of its SHA-256.
func fingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// randomToken is a well-formed token no server issued.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// encodeURIComponent escapes s as JavaScript's encodeURIComponent does: every
// byte but A-Z a-z 0-9 - _ . ! ~ * ' ( ) is percent-encoded (so ':' → %3A and
// '/' → %2F, which url.PathEscape would leave or treat differently).
func encodeURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			strings.IndexByte("-_.!~*'()", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// issueToken issues a machine token through url with the admin token.
func issueToken(t testing.TB, c *apitest.Cluster, url, machine string) wire.IssuedToken {
	t.Helper()
	r := send(t, jsonCall(http.MethodPost, url+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: machine}))
	wantStatus(t, "POST /v1/tokens/member", r, http.StatusCreated)
	return decodeWire[wire.IssuedToken](t, r)
}

// acquire acquires a lease through url and returns it.
func acquire(t testing.TB, url, token string, req wire.AcquireRequest) wire.PortLease {
	t.Helper()
	r := send(t, jsonCall(http.MethodPost, url+"/v1/leases/port", token, req))
	wantStatus(t, "POST /v1/leases/port", r, http.StatusCreated)
	return decodeWire[wire.PortLease](t, r)
}

// leaseCall is a lease heartbeat or release exactly as port-lease-heartbeat.ts
// sends it: no body, no content type, the lease id in x-port-lease-id.
func leaseCall(method, url string, port int, token, leaseID string) call {
	path := url + "/v1/leases/port/" + strconv.Itoa(port)
	if method == http.MethodPost {
		path += "/heartbeat"
	}
	c := call{Method: method, URL: path, Auth: bearer(token)}
	if leaseID != "" {
		c.Header = map[string]string{wire.HeaderPortLeaseID: leaseID}
	}
	return c
}

// releaseAll releases every lease the leader holds, with the admin token.
func releaseAll(t testing.TB, c *apitest.Cluster) {
	t.Helper()
	leader := c.Nodes[c.Leader()]
	for _, l := range leader.Node.FSM().Leases() {
		r := send(t, leaseCall(http.MethodDelete, leader.URL, l.Port, c.Tokens.Admin, l.LeaseID))
		if r.Status != http.StatusNoContent && r.Status != http.StatusNotFound {
			t.Fatalf("release port %d: %s", l.Port, r)
		}
	}
}

// waitFor polls cond every 5 ms until it holds, failing the test after d.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// headerUint parses a numeric read header.
func headerUint(t testing.TB, r reply, name string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(r.Header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, r.Header.Get(name), err)
	}
	return v
}
