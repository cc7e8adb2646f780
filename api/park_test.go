package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// A /v1/primary blocking query that waits is parked (its connection taken
// from net/http). Its answer is the handler's (status, headers, body), its
// keep-alive connection serves the next request, a change of primary answers
// it, a client that leaves frees its slot and is counted 499, Connection:
// close is honoured, and Shutdown answers what is parked.
func TestServer_ParkedPrimaryQuery(t *testing.T) {
	c := startGuarded(t, wire.NodeLimits{}, apitest.Options{})
	fi := c.Follower()
	n := c.Nodes[fi]
	query := testutil.Bearer(c.Tokens.Query)
	plain := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary", Auth: query})
	idx := headerUint(t, plain, wire.HeaderIndex)
	parked := func(want int) {
		t.Helper()
		c.WaitFor(fmt.Sprintf("%d parked queries", want), 10*time.Second, func() bool { return n.Server.ParkedQueries() == want })
	}

	// One connection for the client, so a reused one is the parked one.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	var reused atomic.Int32
	type answer struct {
		status int
		header http.Header
	}
	get := func(ctx context.Context, url string) (answer, []byte, error) {
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if i.Reused {
				reused.Add(1)
			}
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
		req.Header.Set("Authorization", query)
		resp, err := client.Do(req)
		if err != nil {
			return answer{}, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header}, body, err
	}

	t.Run("answer equals the handler's and the connection carries on", func(t *testing.T) {
		type result struct {
			resp    answer
			body    []byte
			err     error
			elapsed time.Duration
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			resp, body, err := get(context.Background(), fmt.Sprintf("%s/v1/primary?index=%d&wait=600ms", n.URL, idx))
			done <- result{resp, body, err, time.Since(start)}
		}()
		parked(1)
		if got := c.reg.metric(t, fi, "elanous_blocking_queries"); got != 1 {
			t.Errorf("elanous_blocking_queries = %v while parked, want 1", got)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.status != http.StatusOK || r.elapsed < 600*time.Millisecond {
			t.Fatalf("parked query answered %d after %v, want 200 after its 600 ms wait", r.resp.status, r.elapsed)
		}
		if string(r.body) != string(plain.Body) {
			t.Errorf("parked answer body = %q, want the handler's %q", r.body, plain.Body)
		}
		for _, h := range []string{"Content-Type", wire.HeaderGeneration, wire.HeaderIndex, wire.HeaderKnownLeader} {
			if got, want := r.resp.header.Get(h), plain.Header.Get(h); got != want {
				t.Errorf("parked answer %s = %q, want the handler's %q", h, got, want)
			}
		}
		if r.resp.header.Get(wire.HeaderLastContactMs) == "" || r.resp.header.Get("Date") == "" {
			t.Errorf("parked answer headers = %v, want %s and Date", r.resp.header, wire.HeaderLastContactMs)
		}
		parked(0)
		before := reused.Load()
		resp, _, err := get(context.Background(), n.URL+"/v1/health")
		if err != nil || resp.status != http.StatusOK {
			t.Fatalf("the next request on the connection: %v, %v", resp.status, err)
		}
		if reused.Load() != before+1 {
			t.Errorf("the request after a parked answer opened a new connection, want the parked one reused")
		}
		if got := c.reg.metric(t, fi, "elanous_blocking_queries"); got != 0 {
			t.Errorf("elanous_blocking_queries = %v after the answer, want 0", got)
		}
	})

	t.Run("a new primary answers it", func(t *testing.T) {
		done := make(chan error, 1)
		var gen uint64
		go func() {
			resp, _, err := get(context.Background(), fmt.Sprintf("%s/v1/primary?index=%d&wait=30s", n.URL, idx))
			if err == nil {
				_, err = fmt.Sscan(resp.header.Get(wire.HeaderGeneration), &gen)
			}
			done <- err
		}()
		parked(1)
		before := headerUint(t, plain, wire.HeaderGeneration)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Nodes[c.Leader()].Node.TransferLeadership(ctx)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a parked query was not answered after the leadership moved")
		}
		if gen <= before {
			t.Errorf("parked query answered generation %d, want above %d", gen, before)
		}
		parked(0)
	})

	// Find the primary's index now (the transfer moved it).
	idx = headerUint(t, testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/primary"}), wire.HeaderIndex)

	t.Run("a client that leaves frees its slot", func(t *testing.T) {
		was := c.reg.metric(t, fi, "elanous_http_requests_total", "route", "/v1/primary", "code", "499")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = get(ctx, fmt.Sprintf("%s/v1/primary?index=%d&wait=30s", n.URL, idx))
		}()
		parked(1)
		cancel()
		<-done
		parked(0)
		c.WaitFor("the abandoned query counted 499", 10*time.Second, func() bool {
			return c.reg.metric(t, fi, "elanous_http_requests_total", "route", "/v1/primary", "code", "499") == was+1
		})
		if got := c.reg.metric(t, fi, "elanous_blocking_queries"); got != 0 {
			t.Errorf("elanous_blocking_queries = %v after the client left, want 0", got)
		}
	})

	raw := func(t *testing.T, extra string) (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		fmt.Fprintf(conn, "GET /v1/primary?index=%d&wait=%s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n%s\r\n", idx, "300ms", query, extra)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		return conn, bufio.NewReader(conn)
	}

	t.Run("Connection: close is honoured", func(t *testing.T) {
		_, br := raw(t, "Connection: close\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("answer = %d close %v, want 200 and Connection: close", resp.StatusCode, resp.Close)
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("after the answer read %q, %v; want the connection closed", rest, err)
		}
	})

	t.Run("Shutdown answers what is parked", func(t *testing.T) {
		_, br := raw(t, "")
		parked(1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Server.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("parked query at Shutdown: %v", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("answer at Shutdown = %d close %v, want 200 and Connection: close", resp.StatusCode, resp.Close)
		}
	})
}
