package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// NewClient returns an HTTP client for tests: no proxy, redirects returned
// rather than followed, requests bounded by timeout. Without keepAlive every
// request opens a new connection, which suits tests that kill the processes
// they talk to (no idle connection to a dead process is ever reused).
func NewClient(timeout time.Duration, keepAlive bool) *http.Client {
	return &http.Client{
		Timeout:       timeout,
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: !keepAlive},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// defaultClient sends a Call without a Client: keep-alive, and a timeout
// above the longest blocking query the tests make.
var defaultClient = NewClient(20*time.Second, true)

// Call is one HTTP request of a test.
type Call struct {
	Method string
	URL    string
	// Auth is the whole Authorization header value ("" sends none); Bearer
	// builds the usual one.
	Auth string
	// Body is sent as is; "" sends no body (and no Content-Type unless
	// ContentType is set).
	Body        string
	ContentType string
	Header      map[string]string
	// Chunked hides the body's length, so it is sent chunked.
	Chunked bool
	// OnWrote, when set, is called once the request is written (httptrace).
	OnWrote func()
	// NoRetry turns off Send's retry of 503 no-leader / not-ready answers
	// (for tests of exactly those answers).
	NoRetry bool
	// Client sends the request; nil uses a shared keep-alive client with a
	// 20 s timeout.
	Client *http.Client
}

// Reply is what a Call got back, read in full.
type Reply struct {
	Status  int
	Header  http.Header
	Body    []byte
	Elapsed time.Duration // from sending the request to reading the whole body
}

// String shows the status and the start of the body, for failure messages.
func (r Reply) String() string {
	body := strings.TrimSpace(string(r.Body))
	if len(body) > 300 {
		body = body[:300] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, body)
}

// Bearer is the Authorization header value for token ("" for none).
func Bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// JSONCall is a call with token's bearer authorization carrying v as a JSON
// body, as the members send it. A nil v sends no body.
func JSONCall(method, url, token string, v any) Call {
	c := Call{Method: method, URL: url, Auth: Bearer(token)}
	if v == nil {
		return c
	}
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("testutil.JSONCall: encode %T: %v", v, err))
	}
	c.Body, c.ContentType = string(data), "application/json"
	return c
}

// WithHeader returns a copy of c that also sends the header name: value.
func (c Call) WithHeader(name, value string) Call {
	h := make(map[string]string, len(c.Header)+1)
	for k, v := range c.Header {
		h[k] = v
	}
	h[name] = value
	c.Header = h
	return c
}

// Do performs c once and reads the whole answer. It is safe to call from any
// goroutine; its error is a transport error (no answer), never a status.
func Do(c Call) (Reply, error) { return DoContext(context.Background(), c) }

// DoContext is Do bounded by ctx as well: cancelling ctx abandons the
// request (for pollers that stop with their test).
func DoContext(ctx context.Context, c Call) (Reply, error) {
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
		if c.Chunked {
			body = io.MultiReader(body) // an unknown length: Transfer-Encoding chunked
		}
	}
	if c.OnWrote != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { c.OnWrote() },
		})
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, c.URL, body)
	if err != nil {
		return Reply{}, err
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
	client := c.Client
	if client == nil {
		client = defaultClient
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, fmt.Errorf("%s %s: read body: %w", c.Method, c.URL, err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: data, Elapsed: time.Since(start)}, nil
}

// Send performs c and fails the test on a transport error. Like the member
// client, it retries (for up to 10 s, 50 ms apart) an answer of 503 no-leader
// or not-ready, which by contract applied nothing, so the retry is safe for
// every request; it never retries 503 outcome-unknown. c.NoRetry turns the
// retry off.
func Send(t testing.TB, c Call) Reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := Do(c)
		if err != nil {
			t.Fatalf("%s %s: %v", c.Method, c.URL, err)
		}
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

// DoExpect performs c once and returns an error unless it got an answer of
// status want. Safe from any goroutine; for polls.
func DoExpect(c Call, want int) (Reply, error) {
	r, err := Do(c)
	if err != nil {
		return r, err
	}
	if r.Status != want {
		return r, fmt.Errorf("%s %s = %v, want %d", c.Method, c.URL, r, want)
	}
	return r, nil
}

// Expect performs c once (no retry) and fails the test unless it got an
// answer of status want.
func Expect(t testing.TB, c Call, want int) Reply {
	t.Helper()
	r, err := DoExpect(c, want)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
