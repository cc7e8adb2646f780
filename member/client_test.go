package member

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// recorded is what a recording server saw of one request.
type recorded struct {
	Method, URI, Auth, ContentType, LeaseID, IdemKey, Body string
}

// recordingServer is an httptest server that records every request and
// answers from a function (200 {} by default).
type recordingServer struct {
	*httptest.Server
	mu     sync.Mutex
	seen   []recorded
	answer func(w http.ResponseWriter, r *http.Request)
}

func newRecordingServer(t *testing.T) *recordingServer {
	s := &recordingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, recorded{
			Method: r.Method, URI: r.RequestURI, Auth: r.Header.Get("Authorization"),
			ContentType: r.Header.Get("Content-Type"), LeaseID: r.Header.Get(wire.HeaderPortLeaseID),
			IdemKey: r.Header.Get(wire.HeaderIdempotencyKey), Body: string(body),
		})
		answer := s.answer
		s.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodGet && listPath(r.URL.Path):
			io.WriteString(w, "[]")
		default:
			io.WriteString(w, "{}")
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// listPath reports whether GET path answers a JSON array.
func listPath(path string) bool {
	return path == "/v1/resources" || path == "/v1/leases/port" || path == "/v1/tokens/member"
}

func (s *recordingServer) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.seen...)
}

func (s *recordingServer) setAnswer(f func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = f
}

func TestClient_Endpoints(t *testing.T) {
	srv := newRecordingServer(t)
	c, err := NewClient(ClientConfig{URL: srv.URL, Token: tokenA})
	if err != nil {
		t.Fatalf("NewClient() error = %v", err)
	}
	bearer := "Bearer " + tokenA
	tests := []struct {
		name string
		call func(context.Context) error
		want recorded
	}{
		{"primary has no token", func(ctx context.Context) error { _, err := c.Primary(ctx); return err },
			recorded{Method: "GET", URI: "/v1/primary"}},
		{"primary blocking", func(ctx context.Context) error { _, _, err := c.PrimaryBlocking(ctx, 7, 30*time.Second); return err },
			recorded{Method: "GET", URI: "/v1/primary?index=7&wait=30s"}},
		{"health", func(ctx context.Context) error { return c.Health(ctx) }, recorded{Method: "GET", URI: "/v1/health"}},
		{"ready", func(ctx context.Context) error { return c.Ready(ctx) }, recorded{Method: "GET", URI: "/v1/ready"}},
		{"register", func(ctx context.Context) error {
			_, err := c.Register(ctx, wire.RegisterRequest{ID: "machine:mbp", Kind: "machine", Name: "mbp", Machine: "mbp", TTLMs: 1})
			return err
		}, recorded{Method: "POST", URI: "/v1/resources/register", Auth: bearer, ContentType: "application/json",
			Body: `{"id":"machine:mbp","kind":"machine","name":"mbp","machine":"mbp","owner":"","observedAt":0,"ttlMs":1}`}},
		{"resource heartbeat escapes the id", func(ctx context.Context) error {
			_, err := c.HeartbeatResource(ctx, "instance:host/1", nil)
			return err
		}, recorded{Method: "POST", URI: "/v1/resources/instance%3Ahost%2F1/heartbeat", Auth: bearer, ContentType: "application/json", Body: `{}`}},
		{"delete resource", func(ctx context.Context) error { return c.DeleteResource(ctx, "machine:mbp") },
			recorded{Method: "DELETE", URI: "/v1/resources/machine%3Ambp", Auth: bearer}},
		{"list resources", func(ctx context.Context) error {
			_, err := c.ListResources(ctx, ResourceFilter{Kind: "machine", Machine: "mbp"})
			return err
		}, recorded{Method: "GET", URI: "/v1/resources?kind=machine&machine=mbp", Auth: bearer}},
		{"list resources consistent", func(ctx context.Context) error {
			_, err := c.ListResources(ctx, ResourceFilter{Consistent: true})
			return err
		}, recorded{Method: "GET", URI: "/v1/resources?consistent=true", Auth: bearer}},
		{"list resources blocking", func(ctx context.Context) error {
			_, _, err := c.ListResourcesBlocking(ctx, 42, 1500*time.Millisecond)
			return err
		}, recorded{Method: "GET", URI: "/v1/resources?index=42&wait=1500ms", Auth: bearer}},
		{"get resource", func(ctx context.Context) error { _, err := c.GetResource(ctx, "machine:mbp"); return err },
			recorded{Method: "GET", URI: "/v1/resources/machine%3Ambp", Auth: bearer}},
		{"acquire", func(ctx context.Context) error {
			_, err := c.AcquirePortLease(ctx, wire.AcquireRequest{Machine: "mbp", Purpose: "test", TTLMs: 600000, Excluded: []int{31450}}, "k1")
			return err
		}, recorded{Method: "POST", URI: "/v1/leases/port", Auth: bearer, ContentType: "application/json", IdemKey: "k1",
			Body: `{"machine":"mbp","purpose":"test","ttlMs":600000,"excluded":[31450]}`}},
		{"renew has no body and no content type", func(ctx context.Context) error {
			_, err := c.RenewPortLease(ctx, 31450, "lease-1")
			return err
		}, recorded{Method: "POST", URI: "/v1/leases/port/31450/heartbeat", Auth: bearer, LeaseID: "lease-1"}},
		{"release", func(ctx context.Context) error { return c.ReleasePortLease(ctx, 31450, "lease-1") },
			recorded{Method: "DELETE", URI: "/v1/leases/port/31450", Auth: bearer, LeaseID: "lease-1"}},
		{"list leases", func(ctx context.Context) error { _, err := c.ListPortLeases(ctx, ReadOptions{}); return err },
			recorded{Method: "GET", URI: "/v1/leases/port", Auth: bearer}},
		{"list leases consistent", func(ctx context.Context) error {
			_, err := c.ListPortLeases(ctx, ReadOptions{Consistent: true})
			return err
		}, recorded{Method: "GET", URI: "/v1/leases/port?consistent=true", Auth: bearer}},
		{"list leases blocking", func(ctx context.Context) error { _, _, err := c.ListLeasesBlocking(ctx, 3, 0); return err },
			recorded{Method: "GET", URI: "/v1/leases/port?index=3", Auth: bearer}},
		{"get lease", func(ctx context.Context) error { _, err := c.GetPortLease(ctx, 31451); return err },
			recorded{Method: "GET", URI: "/v1/leases/port/31451", Auth: bearer}},
		{"issue token", func(ctx context.Context) error { _, err := c.IssueMemberToken(ctx, "mbp"); return err },
			recorded{Method: "POST", URI: "/v1/tokens/member", Auth: bearer, ContentType: "application/json", Body: `{"machine":"mbp"}`}},
		{"revoke token", func(ctx context.Context) error { return c.RevokeMemberToken(ctx, "mbp") },
			recorded{Method: "DELETE", URI: "/v1/tokens/member/mbp", Auth: bearer}},
		{"list tokens", func(ctx context.Context) error { _, err := c.ListMemberTokens(ctx, ReadOptions{}); return err },
			recorded{Method: "GET", URI: "/v1/tokens/member", Auth: bearer}},
		{"list tokens consistent", func(ctx context.Context) error {
			_, err := c.ListMemberTokens(ctx, ReadOptions{Consistent: true})
			return err
		}, recorded{Method: "GET", URI: "/v1/tokens/member?consistent=true", Auth: bearer}},
		{"cluster status", func(ctx context.Context) error { _, err := c.ClusterStatus(ctx); return err },
			recorded{Method: "GET", URI: "/v1/cluster/status", Auth: bearer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(srv.requests())
			if err := tt.call(t.Context()); err != nil {
				t.Fatalf("call error = %v", err)
			}
			reqs := srv.requests()
			if len(reqs) != before+1 {
				t.Fatalf("requests = %d, want one more than %d", len(reqs), before)
			}
			if got := reqs[len(reqs)-1]; got != tt.want {
				t.Errorf("request = %+v\nwant      %+v", got, tt.want)
			}
		})
	}
}

func TestClient_Errors(t *testing.T) {
	srv := newRecordingServer(t)
	c, err := NewClient(ClientConfig{URL: srv.URL, Token: tokenA})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("error body", func(t *testing.T) {
		srv.setAnswer(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":"port-band-exhausted","message":"no free port"}`)
		})
		_, err := c.AcquirePortLease(t.Context(), wire.AcquireRequest{Machine: "m", Purpose: "p", TTLMs: 1}, "")
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Code != wire.CodePortBandExhausted || apiErr.Message != "no free port" {
			t.Fatalf("error = %#v, want 409 port-band-exhausted", err)
		}
		if StatusCode(err) != 409 || ErrorCode(err) != wire.CodePortBandExhausted || !IsStatus(err, 400, 409) || IsRetryable(err) || IsNotFound(err) {
			t.Errorf("helpers disagree on %v", err)
		}
	})
	t.Run("plain text body", func(t *testing.T) {
		srv.setAnswer(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "upstream down\n")
		})
		err := c.Health(t.Context())
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Code != "" || apiErr.Message != "upstream down" || !IsRetryable(err) {
			t.Errorf("error = %#v, want a retryable 503 with the text", err)
		}
	})
	t.Run("2xx with a bad body", func(t *testing.T) {
		srv.setAnswer(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not json") })
		_, err := c.ClusterStatus(t.Context())
		if !errors.Is(err, ErrInvalidResponse) || StatusCode(err) != 0 || IsRetryable(err) {
			t.Errorf("error = %v, want ErrInvalidResponse", err)
		}
	})
	t.Run("blocking index header", func(t *testing.T) {
		srv.setAnswer(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(wire.HeaderIndex, "99")
			io.WriteString(w, `[{"id":"machine:a"}]`)
		})
		list, index, err := c.ListResourcesBlocking(t.Context(), 98, time.Second)
		if err != nil || index != 99 || len(list) != 1 || list[0].ID != "machine:a" {
			t.Errorf("ListResourcesBlocking() = %v, %d, %v; want one resource at index 99", list, index, err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		dc, _ := NewClient(ClientConfig{URL: dead.URL, Token: tokenA})
		err := dc.Health(t.Context())
		if !errors.Is(err, ErrUnreachable) || !IsRetryable(err) || StatusCode(err) != 0 {
			t.Errorf("error = %v, want ErrUnreachable", err)
		}
	})
	t.Run("bad configuration", func(t *testing.T) {
		if _, err := NewClient(ClientConfig{URL: "http://h/x"}); !errors.Is(err, ErrInvalidURL) {
			t.Errorf("NewClient(path) error = %v, want ErrInvalidURL", err)
		}
		if _, err := NewClient(ClientConfig{URL: "http://h", Token: "secret"}); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("NewClient(bad token) error = %v, want ErrInvalidToken", err)
		}
	})
}

func TestEscapeID(t *testing.T) {
	// Expected values are JavaScript's encodeURIComponent.
	tests := map[string]string{
		"machine:mbp":        "machine%3Ambp",
		"instance:host/1":    "instance%3Ahost%2F1",
		"a-b_c.d!e~f*g'h(i)": "a-b_c.d!e~f*g'h(i)",
		"sp ace+plus?q#h&=":  "sp%20ace%2Bplus%3Fq%23h%26%3D",
		"é":                  "%C3%A9",
		"100%":               "100%25",
	}
	for in, want := range tests {
		if got := EscapeID(in); got != want {
			t.Errorf("EscapeID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestClient_TokenOnlyToConfiguredAddress: two real servers record the
// Authorization header of everything they receive. The member joined
// through a; b becomes primary. Whatever the client does, b never sees the
// token — requests go to a, which forwards.
func TestClient_TokenOnlyToConfiguredAddress(t *testing.T) {
	a, b := newRecordingServer(t), newRecordingServer(t)
	b.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/primary" {
			json.NewEncoder(w).Encode(wire.Primary{Known: true, Holder: "b", Generation: 2, URL: b.URL})
			return
		}
		if listPath(r.URL.Path) {
			io.WriteString(w, "[]")
			return
		}
		io.WriteString(w, "{}")
	})
	root := t.TempDir()
	if err := WriteJoinFile(root, Join{URL: a.URL, Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}}); err != nil {
		t.Fatal(err)
	}
	join, err := ReadJoinFile(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(ResolverConfig{
		Candidates: []Candidate{{Machine: "a", URL: a.URL}, {Machine: "b", URL: b.URL}},
		URL:        "http://10.255.0.1:31413", Tokens: Tokens{ScopeMember: tokenB}, // configured for another address
		Join: join,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientConfig{Resolver: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.Register(ctx, wire.RegisterRequest{ID: "machine:mbp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RenewPortLease(ctx, 31450, "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reresolve(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListResources(ctx, ResourceFilter{}); err != nil {
		t.Fatal(err)
	}
	for _, req := range b.requests() {
		if req.Auth != "" {
			t.Errorf("b received Authorization on %s %s", req.Method, req.URI)
		}
	}
	var authed int
	for _, req := range a.requests() {
		switch req.Auth {
		case "":
		case "Bearer " + tokenA:
			authed++
		default:
			t.Errorf("a received a token it was not joined with on %s %s", req.Method, req.URI)
		}
	}
	if authed != 3 {
		t.Errorf("a received the joined token %d times, want 3", authed)
	}
}

// TestHeartbeat_NoTokenInLogs runs the heartbeat against real servers that
// fail in every way it logs, with debug logging, and searches the output.
func TestHeartbeat_NoTokenInLogs(t *testing.T) {
	srv := newRecordingServer(t)
	srv.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/primary":
			io.WriteString(w, `{"known":true,"holder":"a","generation":1}`)
		case strings.HasSuffix(r.URL.Path, "/register"):
			io.WriteString(w, "{}")
		default:
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized","message":"unknown token"}`)
		}
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	r, err := NewResolver(ResolverConfig{Candidates: []Candidate{
		{Machine: "a", URL: srv.URL, Tokens: Tokens{ScopeMember: tokenA}},
		{Machine: "z", URL: dead.URL, Tokens: Tokens{ScopeMember: tokenB}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	r.log = logs.logger()
	c, _ := NewClient(ClientConfig{Resolver: r})
	cfg := testHeartbeatConfig(c, 5*time.Millisecond)
	cfg.Logger = logs.logger()
	hb := mustStartHeartbeat(t, t.Context(), cfg)
	if !logs.waitFor("http-401", 10*time.Second) {
		t.Fatalf("no failure logged within 10s:\n%s", logs.String())
	}
	hb.Stop()
	out := logs.String()
	for _, tok := range []string{tokenA, tokenB} {
		if strings.Contains(out, tok) {
			t.Errorf("a token appears in the logs:\n%s", out)
		}
	}
}
