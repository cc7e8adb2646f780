package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/wire"
)

// A leader that reads a forwarded acquire (which carries Idempotency-Key),
// applies it and dies before answering leaves the follower a write that may
// have been applied: when the transport's replay of the request cannot even
// dial, the follower must answer outcome-unknown, never 503 no-leader ("not
// applied").
func TestSendForward_LeaderKillAfterWrite(t *testing.T) {
	var srv *httptest.Server
	var calls atomic.Int32
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if calls.Add(1) == 1 {
			return // the first request only opens the pooled connection
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("Hijack() error = %v", err)
			return
		}
		_ = srv.Listener.Close() // the leader is gone: a replay cannot dial
		_ = conn.Close()
	}))
	defer srv.Close()
	in := httptest.NewRequest(http.MethodPost, "/v1/leases/port", strings.NewReader("{}"))
	in.Header.Set(wire.HeaderIdempotencyKey, "k1")
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := sendForward(context.Background(), client, in, []byte(`{}`), cluster.Candidate{Machine: "node-a", URL: srv.URL}, "node-b")
	if err != nil {
		t.Fatalf("sendForward() warm-up error = %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	// The replayed request reuses the pooled connection, which the leader drops.
	resp, err = sendForward(context.Background(), client, in, []byte(`{"machine":"m"}`), cluster.Candidate{Machine: "node-a", URL: srv.URL}, "node-b")
	if resp != nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("sendForward() error = %v, want ErrOutcomeUnknown", err)
	}
}

func TestSendForward_UnreachableLeaderIsNotApplied(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	in := httptest.NewRequest(http.MethodPost, "/v1/leases/port", strings.NewReader("{}"))
	in.Header.Set(wire.HeaderIdempotencyKey, "k1")
	resp, err := sendForward(context.Background(), &http.Client{}, in, []byte(`{}`), cluster.Candidate{Machine: "node-a", URL: url}, "node-b")
	if resp != nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, cluster.ErrNoLeader) {
		t.Fatalf("sendForward() error = %v, want ErrNoLeader", err)
	}
}
