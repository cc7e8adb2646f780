package member

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// The fake network answers requests in-process, so the member loops can run
// inside a testing/synctest bubble: no sockets, fake time advances whenever
// every goroutine is blocked, and a hanging request lasts exactly its
// timeout. It plays the server's answers; it holds no cluster logic.

// outcome is one scripted answer.
type outcome struct {
	status int
	body   string      // response body; a default is used when empty
	header http.Header // extra response headers
	refuse bool        // connection refused: no answer at all
	hang   bool        // never answers: the client's timeout fires
}

func status(code int) outcome { return outcome{status: code} }

var (
	refused = outcome{refuse: true}
	hang    = outcome{hang: true}
)

func (o outcome) String() string {
	switch {
	case o.refuse:
		return "refused"
	case o.hang:
		return "timeout"
	}
	return fmt.Sprint(o.status)
}

// hit is one request the fake network received.
type hit struct {
	at     time.Duration // since the fake network was made
	host   string
	method string
	path   string // escaped path and query, as sent
	kind   string
	auth   string
	lease  string // x-port-lease-id
	body   string
	answer outcome
}

func (h hit) String() string {
	return fmt.Sprintf("%v %s %s %s -> %v", h.at, h.host, h.method, h.path, h.answer)
}

// fakeNet routes by "host kind" keys to scripted answers.
type fakeNet struct {
	start time.Time

	mu       sync.Mutex
	queues   map[string][]outcome      // guarded by mu: answers used once, in order
	defaults map[string]outcome        // guarded by mu: answer once the queue is empty
	primary  map[string]wire.Primary   // guarded by mu: host → its /v1/primary answer
	onHit    func(h hit)               // guarded by mu: called with each request
	hits     []hit                     // guarded by mu
	blocking map[string]chan struct{}  // guarded by mu: host → closed when its primary changes
	index    map[string]uint64         // guarded by mu: host → X-Elanous-Index of /v1/primary
	waits    map[string]time.Duration  // guarded by mu: host → last wait asked
	extra    map[string]func() outcome // guarded by mu: dynamic answers
}

func newFakeNet() *fakeNet {
	return &fakeNet{
		start:    time.Now(),
		queues:   map[string][]outcome{},
		defaults: map[string]outcome{},
		primary:  map[string]wire.Primary{},
		blocking: map[string]chan struct{}{},
		index:    map[string]uint64{},
		waits:    map[string]time.Duration{},
		extra:    map[string]func() outcome{},
	}
}

// client returns an *http.Client whose transport is the fake network.
func (n *fakeNet) client() *http.Client { return &http.Client{Transport: n} }

// script queues answers for key ("a.test heartbeat" etc.).
func (n *fakeNet) script(key string, answers ...outcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queues[key] = append(n.queues[key], answers...)
}

// setDefault sets the answer for key once its queue is empty.
func (n *fakeNet) setDefault(key string, o outcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.defaults[key] = o
}

// setPrimary sets what host answers on /v1/primary and wakes its blocking
// queries, as a new claim would.
func (n *fakeNet) setPrimary(host string, p wire.Primary) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.primary[host] = p
	n.index[host]++
	if ch, ok := n.blocking[host]; ok {
		close(ch)
		delete(n.blocking, host)
	}
}

// requests returns the hits of one kind (all kinds when kind is "").
func (n *fakeNet) requests(kind string) []hit {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []hit
	for _, h := range n.hits {
		if kind == "" || h.kind == kind {
			out = append(out, h)
		}
	}
	return out
}

// times returns when each hit of kind arrived.
func (n *fakeNet) times(kind string) []time.Duration {
	var out []time.Duration
	for _, h := range n.requests(kind) {
		out = append(out, h.at)
	}
	return out
}

// kindOf classifies a request by path.
func kindOf(r *http.Request) string {
	p := r.URL.EscapedPath()
	switch {
	case p == "/v1/primary":
		return "primary"
	case p == "/v1/resources/register":
		return "register"
	case strings.HasPrefix(p, "/v1/resources/instance") && strings.HasSuffix(p, "/heartbeat"):
		return "instance-heartbeat"
	case strings.HasPrefix(p, "/v1/resources/") && strings.HasSuffix(p, "/heartbeat"):
		return "heartbeat"
	case strings.HasPrefix(p, "/v1/leases/port/") && strings.HasSuffix(p, "/heartbeat"):
		return "renew"
	case strings.HasPrefix(p, "/v1/leases/port/") && r.Method == http.MethodDelete:
		return "release"
	case p == "/v1/leases/port" && r.Method == http.MethodPost:
		return "acquire"
	}
	return r.Method + " " + p
}

// RoundTrip answers a request from the script.
func (n *fakeNet) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	kind := kindOf(req)
	key := req.URL.Host + " " + kind
	n.mu.Lock()
	var out outcome
	if q := n.queues[key]; len(q) > 0 {
		out, n.queues[key] = q[0], q[1:]
	} else if d, ok := n.defaults[key]; ok {
		out = d
	} else if f, ok := n.extra[key]; ok {
		out = f()
	} else {
		out = status(http.StatusOK)
	}
	h := hit{
		at: time.Since(n.start), host: req.URL.Host, method: req.Method, path: req.URL.RequestURI(),
		kind: kind, auth: req.Header.Get("Authorization"), lease: req.Header.Get(wire.HeaderPortLeaseID),
		body: string(body), answer: out,
	}
	n.hits = append(n.hits, h)
	onHit := n.onHit
	var wake chan struct{}
	index := n.index[req.URL.Host]
	if kind == "primary" && out.status == http.StatusOK && !out.refuse && !out.hang && out.body == "" {
		if asked := req.URL.Query().Get("index"); asked != "" && asked == fmt.Sprint(index) {
			wake = n.blocking[req.URL.Host]
			if wake == nil {
				wake = make(chan struct{})
				n.blocking[req.URL.Host] = wake
			}
			n.waits[req.URL.Host], _ = time.ParseDuration(req.URL.Query().Get("wait"))
		}
	}
	n.mu.Unlock()
	if onHit != nil {
		onHit(h)
	}
	switch {
	case out.refuse:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case out.hang:
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if wake != nil {
		n.mu.Lock()
		wait := n.waits[req.URL.Host]
		n.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
		t.Stop()
	}
	n.mu.Lock()
	respBody := out.body
	if respBody == "" {
		switch {
		case kind == "primary":
			p, ok := n.primary[req.URL.Host]
			if !ok {
				p = wire.Primary{Known: false}
			}
			data, _ := json.Marshal(p)
			respBody = string(data)
		case out.status >= 200 && out.status < 300:
			respBody = "{}"
		default:
			respBody = fmt.Sprintf(`{"error":"code-%d","message":"scripted %d"}`, out.status, out.status)
		}
	}
	header := http.Header{"Content-Type": {"application/json"}}
	if kind == "primary" {
		header.Set(wire.HeaderIndex, fmt.Sprint(n.index[req.URL.Host]))
	}
	n.mu.Unlock()
	for k, v := range out.header {
		header[k] = v
	}
	return &http.Response{
		StatusCode: out.status, Status: http.StatusText(out.status), Header: header,
		Body: io.NopCloser(strings.NewReader(respBody)), Request: req, ContentLength: int64(len(respBody)),
	}, nil
}

// Two well-formed tokens for tests.
var (
	tokenA = strings.Repeat("a1", 32)
	tokenB = strings.Repeat("b2", 32)
)

// fakeClient builds a Client resolving over the given hosts (named after the
// host's first label), each configured with token.
func fakeClient(t *testing.T, n *fakeNet, token string, hosts ...string) *Client {
	t.Helper()
	var cands []Candidate
	for _, h := range hosts {
		name, _, _ := strings.Cut(h, ".")
		cands = append(cands, Candidate{Machine: name, URL: "http://" + h, Tokens: Tokens{ScopeMember: token}})
	}
	r, err := NewResolver(ResolverConfig{Candidates: cands, HTTPClient: n.client()})
	if err != nil {
		t.Fatalf("NewResolver() error = %v", err)
	}
	c, err := NewClient(ClientConfig{Resolver: r, HTTPClient: n.client()})
	if err != nil {
		t.Fatalf("NewClient() error = %v", err)
	}
	return c
}

// logBuffer captures slog output.
type logBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{} // guarded by mu; signalled on every write
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify == nil {
		b.notify = make(chan struct{}, 1)
	}
	select {
	case b.notify <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

// waitFor blocks until the output contains s or timeout passes; it reports
// whether s appeared. It wakes on every write rather than sleeping.
func (b *logBuffer) waitFor(s string, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if b.notify == nil {
			b.notify = make(chan struct{}, 1)
		}
		found, notify := strings.Contains(b.buf.String(), s), b.notify
		b.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-notify:
		case <-deadline.C:
			return false
		}
	}
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// secs turns a list of seconds into durations.
func secs(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}
