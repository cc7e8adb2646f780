package testutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// fatalRecorder is a testing.TB whose Fatal ends only the calling goroutine
// and records the message, so a helper's failure can be asserted.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()             {}
func (f *fatalRecorder) Logf(string, ...any) {}
func (f *fatalRecorder) Fatal(args ...any)   { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn with a fatalRecorder and returns its failure message ("" if none).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	return rec.msg
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	if msg := failure(t, func(tb testing.TB) {
		WaitFor(tb, "three polls", time.Second, func() bool { return n.Add(1) >= 3 })
	}); msg != "" {
		t.Fatalf("WaitFor() failed with %q, want success", msg)
	}
	msg := failure(t, func(tb testing.TB) {
		WaitFor(tb, "never", 20*time.Millisecond, func() bool { return false })
	})
	if !strings.Contains(msg, "waiting for never") {
		t.Fatalf("WaitFor() on a condition that never holds failed with %q, want it named", msg)
	}
}

func TestPoll_ReportsLastError(t *testing.T) {
	msg := failure(t, func(tb testing.TB) {
		Poll(tb, "the impossible", 50*time.Millisecond, func() error { return errors.New("x is not there") })
	})
	if !strings.Contains(msg, "the impossible") || !strings.Contains(msg, "x is not there") {
		t.Fatalf("Poll() failed with %q, want what and the last error", msg)
	}
}

func TestHold_FailsAtTheFirstBreak(t *testing.T) {
	var n atomic.Int32
	if msg := failure(t, func(tb testing.TB) {
		Hold(tb, "always", 20*time.Millisecond, time.Millisecond, func() error { n.Add(1); return nil })
	}); msg != "" || n.Load() < 2 {
		t.Fatalf("Hold() of an invariant that holds failed with %q after %d samples, want success after several", msg, n.Load())
	}
	n.Store(0)
	msg := failure(t, func(tb testing.TB) {
		Hold(tb, "the count", time.Minute, time.Millisecond, func() error {
			if n.Add(1) == 3 {
				return errors.New("count is 3")
			}
			return nil
		})
	})
	if !strings.Contains(msg, "the count") || !strings.Contains(msg, "count is 3") || n.Load() != 3 {
		t.Fatalf("Hold() failed with %q after %d samples, want the third sample's error", msg, n.Load())
	}
}

func TestPause_EndsWhenStopped(t *testing.T) {
	stop := make(chan struct{})
	if !Pause(stop, time.Millisecond) {
		t.Fatal("Pause() with stop open = false, want true")
	}
	close(stop)
	if Pause(stop, time.Hour) {
		t.Fatal("Pause() with stop closed = true, want false")
	}
}

func TestRandomToken(t *testing.T) {
	a, b := RandomToken(), RandomToken()
	if len(a) != 64 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("RandomToken() = %q, want 64 lowercase hex", a)
	}
	if a == b {
		t.Fatalf("RandomToken() twice = %q, want two tokens", a)
	}
}

// server answers with the statuses and codes in answers, one per request,
// repeating the last; it records what each request carried.
type server struct {
	answers []answer
	n       atomic.Int32
	got     chan *http.Request
	bodies  chan string
}

type answer struct {
	status int
	code   string
}

func newServer(t *testing.T, answers ...answer) (*server, string) {
	s := &server{answers: answers, got: make(chan *http.Request, 100), bodies: make(chan string, 100)}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.got <- r
		s.bodies <- string(body)
		a := s.answers[min(int(s.n.Add(1))-1, len(s.answers)-1)]
		w.Header().Set("Content-Type", "application/json")
		if a.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(a.status)
		if a.code != "" {
			_ = json.NewEncoder(w).Encode(wire.Error{Error: a.code, Message: "m"})
		} else {
			_, _ = w.Write([]byte(`{"known":true}`))
		}
	}))
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func TestSend_RetriesOnlyWhatAppliedNothing(t *testing.T) {
	tests := []struct {
		name     string
		answers  []answer
		noRetry  bool
		want     int
		requests int32
	}{
		{"no-leader then ok", []answer{{503, wire.CodeNoLeader}, {503, wire.CodeNotReady}, {200, ""}}, false, 200, 3},
		{"outcome-unknown is final", []answer{{503, wire.CodeOutcomeUnknown}, {200, ""}}, false, 503, 1},
		{"NoRetry", []answer{{503, wire.CodeNoLeader}, {200, ""}}, true, 503, 1},
		{"4xx is final", []answer{{404, wire.CodeNotFound}, {200, ""}}, false, 404, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := newServer(t, tt.answers...)
			r := Send(t, Call{Method: http.MethodGet, URL: url, NoRetry: tt.noRetry})
			if r.Status != tt.want || s.n.Load() != tt.requests {
				t.Fatalf("Send() = %s after %d requests, want %d after %d", r, s.n.Load(), tt.want, tt.requests)
			}
		})
	}
}

func TestJSONCall_SendsWhatItSays(t *testing.T) {
	s, url := newServer(t, answer{200, ""})
	token := RandomToken()
	c := JSONCall(http.MethodPost, url, token, map[string]int{"a": 1}).WithHeader(wire.HeaderPortLeaseID, "l1")
	Expect(t, c, http.StatusOK)
	req, body := <-s.got, <-s.bodies
	if req.Header.Get("Authorization") != "Bearer "+token || req.Header.Get("Content-Type") != "application/json" ||
		req.Header.Get(wire.HeaderPortLeaseID) != "l1" || body != `{"a":1}` {
		t.Fatalf("request headers %v body %q, want bearer, JSON content type, lease id and {\"a\":1}", req.Header, body)
	}
	Expect(t, JSONCall(http.MethodDelete, url, "", nil), http.StatusOK)
	req, body = <-s.got, <-s.bodies
	if req.Header.Get("Authorization") != "" || req.Header.Get("Content-Type") != "" || body != "" {
		t.Fatalf("JSONCall(nil) sent headers %v body %q, want neither auth, content type nor body", req.Header, body)
	}
	if _, err := DoExpect(JSONCall(http.MethodGet, url, "", nil), http.StatusTeapot); err == nil {
		t.Fatalf("DoExpect(want 418) of a 200 answer = nil, want an error")
	}
}

func TestCheckError(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name string
		r    Reply
		code string
		ok   bool
	}{
		{"well-formed", Reply{Status: 404, Header: hdr(), Body: []byte(`{"error":"not-found","message":"m"}`)}, wire.CodeNotFound, true},
		{"any code", Reply{Status: 400, Header: hdr(), Body: []byte(`{"error":"invalid-request","message":"m"}`)}, "", true},
		{"other code", Reply{Status: 404, Header: hdr(), Body: []byte(`{"error":"forbidden","message":"m"}`)}, wire.CodeNotFound, false},
		{"not an error", Reply{Status: 200, Header: hdr(), Body: []byte(`{}`)}, "", false},
		{"unknown field", Reply{Status: 404, Header: hdr(), Body: []byte(`{"error":"not-found","message":"m","x":1}`)}, "", false},
		{"empty message", Reply{Status: 404, Header: hdr(), Body: []byte(`{"error":"not-found","message":""}`)}, "", false},
		{"text", Reply{Status: 404, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(`{"error":"not-found","message":"m"}`)}, "", false},
		{"503 without Retry-After", Reply{Status: 503, Header: hdr(), Body: []byte(`{"error":"no-leader","message":"m"}`)}, "", false},
		{"503 with Retry-After", Reply{Status: 503, Header: hdr("Retry-After", "1"), Body: []byte(`{"error":"no-leader","message":"m"}`)}, wire.CodeNoLeader, true},
		{"401 without WWW-Authenticate", Reply{Status: 401, Header: hdr(), Body: []byte(`{"error":"unauthorized","message":"m"}`)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckError(tt.r, tt.code); (err == nil) != tt.ok {
				t.Fatalf("CheckError() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestStrictUnmarshal(t *testing.T) {
	var p wire.Primary
	for _, bad := range []string{`{"known":true,"extra":1}`, `{"known":true}{}`, `{"known":"yes"}`} {
		if err := StrictUnmarshal([]byte(bad), &p); err == nil {
			t.Errorf("StrictUnmarshal(%s) = nil, want an error", bad)
		}
	}
	if err := StrictUnmarshal([]byte(`{"known":true} `), &p); err != nil || !p.Known {
		t.Errorf("StrictUnmarshal() = %v, %+v, want known", err, p)
	}
}

// SyncBuffer takes writes from many goroutines (go test -race checks the
// locking) and JSONLines reads them back, failing on a line that is not JSON.
func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			fmt.Fprintf(&b, "{\"n\":%d}\n", i)
		}()
	}
	for range 8 {
		<-done
	}
	if got := len(b.JSONLines(t)); got != 8 {
		t.Fatalf("JSONLines() = %d lines, want 8:\n%s", got, b.String())
	}
	b.Write([]byte("\nnot json\n"))
	if msg := failure(t, func(tb testing.TB) { b.JSONLines(tb) }); !strings.Contains(msg, `"not json" is not JSON`) {
		t.Fatalf("JSONLines() on a line that is not JSON failed with %q, want the line named", msg)
	}
}
