package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// The HTTP ceiling: how many request/answer pairs this machine carries over
// HTTP/1.1 with no work behind them, in the rows' client shape. Three
// processes of this driver serve on loopback; the first answers every
// request at once with a small JSON body, the other two forward each
// request to the first (as a follower forwards a write to the leader) and
// copy its answer back. It is measured twice: every client on the first
// process, and client i on process i%3 (the rows' spread). No API over
// per-request HTTP/1.1 on this machine can pass the second figure on the
// rows whose clients are spread; the report gives each elanous row as a
// fraction of it.

// noopServeFlag runs this binary as one ceiling process: noopServeFlag
// <listen addr> [<forward URL>].
const noopServeFlag = "--noop-serve"

// noopAnswer is the answer body: the size of a register answer.
var noopAnswer = []byte(`{"id":"instance:bench/0","machine":"bench","status":"up","ttlMs":60000,"meta":{}}`)

// runNoopServer serves until ctx ends: answers every request, or forwards
// it to forward and copies the answer back.
func runNoopServer(ctx context.Context, addr, forward string) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if forward == "" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(noopAnswer)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, forward+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		req.Header.Set("Authorization", r.Header.Get("Authorization"))
		req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		resp, err := client.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ceilingReport is the HTTP ceiling, measured after the systems.
type ceilingReport struct {
	// One is every client on the answering process; Spread is client i on
	// process i%3, two of which forward.
	One    *stats `json:"one"`
	Spread *stats `json:"spread"`
	// OfSpread is each elanous throughput row's requests/s (every step of
	// a row is one request) as a fraction of Spread's.
	OfSpread map[string]float64 `json:"ofSpread,omitempty"`
}

// runCeiling starts the three ceiling processes, measures both shapes with
// clients clients for d each, and stops them.
func runCeiling(ctx context.Context, o options, root string, p *procs, pr *printer) (*ceilingReport, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := testcluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	urls := make([]string, 3)
	var started []*testcluster.Proc
	defer func() {
		for _, sp := range started {
			_ = sp.Kill()
		}
	}()
	for i := range urls {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
		urls[i] = "http://" + addr
		args := []string{noopServeFlag, addr}
		if i > 0 {
			args = append(args, urls[0])
		}
		sp, err := p.start(self, args, os.Environ(), filepath.Join(root, fmt.Sprintf("ceiling-%d.log", i)))
		if err != nil {
			return nil, err
		}
		started = append(started, sp)
	}
	for _, u := range urls {
		if err := waitAnswer(ctx, u); err != nil {
			return nil, err
		}
	}
	rep := &ceilingReport{}
	for _, shape := range []struct {
		name string
		only bool
		out  **stats
	}{{"one process", true, &rep.One}, {"spread, two forwarding", false, &rep.Spread}} {
		pr.logf("ceiling: %s: %d clients", shape.name, o.clients)
		var steps []step
		var clients []*elClient
		for i := range o.clients {
			u := urls[i%len(urls)]
			if shape.only {
				u = urls[0]
			}
			c := &elClient{url: u, token: strings.Repeat("0", 64), http: newHTTPClient(), timeout: requestTimeout}
			clients = append(clients, c)
			body := registerBody(benchID(i), "bench", benchTTLMs)
			steps = append(steps, func(ctx context.Context) error { return c.register(ctx, body) })
		}
		st := runLoad(ctx, steps, o.duration, func(elapsed time.Duration, ops, errs int64) {
			pr.logf("ceiling: %s: %4.1fs %7d requests %5d errors", shape.name, elapsed.Seconds(), ops, errs)
		})
		closeIdle(clients)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pr.logf("ceiling: %s: %s", shape.name, st.summary())
		if st.Ops == 0 {
			return nil, fmt.Errorf("ceiling: %s: no request succeeded (%s)", shape.name, st.errorText())
		}
		*shape.out = st
	}
	return rep, nil
}

// waitAnswer waits until u answers a request (the process is listening).
func waitAnswer(ctx context.Context, u string) error {
	err := testcluster.WaitFor(ctx, "the ceiling server to answer", 10*time.Second, pollEvery, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	})
	if err != nil {
		return fmt.Errorf("ceiling process at %s does not answer: %w", u, err)
	}
	return nil
}

// ceilingFractions fills OfSpread from the report's elanous rows.
func ceilingFractions(rep *report) {
	c := rep.Ceiling
	if c == nil || c.Spread == nil || c.Spread.OpsPerSec == 0 {
		return
	}
	c.OfSpread = map[string]float64{}
	for _, row := range rep.Rows {
		st := row.Results["elanous"]
		if st == nil || row.ID == rowFailover || row.ID == rowSingle || row.ID == rowOpen {
			continue
		}
		c.OfSpread[row.ID] = st.OpsPerSec / c.Spread.OpsPerSec
	}
}
