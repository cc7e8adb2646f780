package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elanous/elanous-node/api/wire"
)

// watchReport is the blocking-watch measurement: --watches members each hold
// a blocking GET /v1/primary on every candidate (as the member client's
// WatchPrimary does), so each candidate holds --watches of them.
type watchReport struct {
	// PerCandidate is how many watches each candidate was asked to hold;
	// PerAddress how many of them come from one source address (the
	// loopback addresses 127.1.x.y), and Addresses how many addresses.
	PerCandidate int `json:"perCandidate"`
	PerAddress   int `json:"perAddress"`
	Addresses    int `json:"addresses"`
	// Wait is the wait each query asks for.
	Wait string `json:"wait"`
	// OpenSeconds is how long opening them all took; HoldSeconds how long
	// they were then held while the footprint was sampled.
	OpenSeconds float64 `json:"openSeconds"`
	HoldSeconds float64 `json:"holdSeconds"`
	// FileLimit is this process's RLIMIT_NOFILE during the phase.
	FileLimit uint64      `json:"fileLimit"`
	Nodes     []watchNode `json:"nodes"`
	// ErrorKinds counts the failures (dial errors, connections closed
	// without an answer) by their text.
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	Peaks      []nodePeak     `json:"peaks"`
}

// watchNode is one candidate's side of the watch phase.
type watchNode struct {
	Node string `json:"node"`
	// Index is the X-Elanous-Index of /v1/primary the queries wait past.
	Index uint64 `json:"index"`
	Asked int    `json:"asked"`
	// Held were open and unanswered at the end of the hold; Refused were
	// answered 429; Answered were answered 200 (the primary changed, or the
	// wait was cut short); OtherStatus got another status; Failed never
	// reached the server or were closed without an answer.
	Held        int `json:"held"`
	Refused     int `json:"refused"`
	Answered    int `json:"answered"`
	OtherStatus int `json:"otherStatus"`
	Failed      int `json:"failed"`
	// BaselineRSSBytes is the node's RSS before the watches were opened.
	BaselineRSSBytes int64 `json:"baselineRssBytes"`
	// BlockingQueries is the node's own count (elanous_blocking_queries)
	// at the end of the hold, when it exposes one.
	BlockingQueries *float64 `json:"blockingQueries,omitempty"`
}

// watchWait is the wait every watch asks for: the longest the API allows, so
// none answers within the hold unless the primary changes.
const watchWait = "5m"

// watchAddr is the source address of the a-th group of watches: 127.1.x.y,
// all on the loopback, none the 127.0.0.1 other clients use.
func watchAddr(a int) net.IP {
	return net.IPv4(127, 1, byte(a/250), byte(a%250+1))
}

// maxWatchAddrs is how many distinct addresses watchAddr gives.
const maxWatchAddrs = 250 * 256

// parseStatusLine returns the status code of an HTTP/1.x response's first
// bytes ("HTTP/1.1 429 Too Many Requests\r\n…"); 0 when they are not one.
func parseStatusLine(b []byte) int {
	line, _, _ := strings.Cut(string(b), "\r\n")
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(rest) < 3 {
		return 0
	}
	code, err := strconv.Atoi(rest[:3])
	if err != nil || code < 100 || code > 599 {
		return 0
	}
	return code
}

// raiseFileLimit raises this process's RLIMIT_NOFILE to at least need (the
// hard limit too, which needs root), so the watches' connections fit; the
// nodes it starts afterwards inherit it. It returns the soft limit in force.
func raiseFileLimit(need uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur >= need {
		return r.Cur, nil
	}
	want := r
	want.Cur = need
	want.Max = max(r.Max, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Without the privilege to raise the hard limit, take what it allows.
		want.Cur, want.Max = r.Max, r.Max
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err2 != nil {
			return r.Cur, fmt.Errorf("raise the open-file limit to %d: %w", need, err)
		}
		return want.Cur, fmt.Errorf("raise the open-file limit to %d: %w (it is %d)", need, err, want.Cur)
	}
	return want.Cur, nil
}

// primaryIndex reads X-Elanous-Index of GET /v1/primary on node i.
func (s *elanousSystem) primaryIndex(ctx context.Context, i int) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.nodes[i].url+"/v1/primary", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.status.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/primary on %s: %s", s.nodes[i].name, resp.Status)
	}
	return strconv.ParseUint(resp.Header.Get(wire.HeaderIndex), 10, 64)
}

// watchConn is one open watch. status is 0 while unanswered, the HTTP status
// once answered, -1 when the connection failed or closed without an answer.
type watchConn struct {
	node   int
	conn   net.Conn
	status atomic.Int32
}

// watchErrors counts failures by text; safe for concurrent use.
type watchErrors struct {
	mu    sync.Mutex
	kinds map[string]int // guarded by mu
}

func (e *watchErrors) add(err error) {
	text := err.Error()
	// Connection errors name the ephemeral ports; keep what they have in common.
	if i := strings.LastIndex(text, ": "); i >= 0 {
		text = text[i+2:]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	e.kinds[text]++
}

// runWatches opens the watches, holds them for o.watchHold while sampling
// every node's footprint, counts what each candidate did with them and
// closes them.
func runWatches(ctx context.Context, s *elanousSystem, o options, pr *printer) (*watchReport, error) {
	n, per := o.watches, o.watchesPerAddress
	rep := &watchReport{PerCandidate: n, PerAddress: per, Addresses: (n + per - 1) / per, Wait: watchWait}
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		rep.FileLimit = r.Cur
	}
	token := s.queryToken
	if token == "" {
		token = s.token
	}
	base := s.sample()
	var requests [][]byte
	for i, node := range s.nodes {
		idx, err := s.primaryIndex(ctx, i)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(node.url)
		if err != nil {
			return nil, err
		}
		requests = append(requests, fmt.Appendf(nil, "GET /v1/primary?index=%d&wait=%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUser-Agent: compare-etcd-watch\r\n\r\n", idx, watchWait, u.Host, token))
		rep.Nodes = append(rep.Nodes, watchNode{Node: node.name, Index: idx, Asked: n, BaselineRSSBytes: base[i].RSSBytes})
	}
	smp := startSampler(ctx, o.sampleEvery, s.sample)

	var errs watchErrors
	conns := make([]*watchConn, 0, n*len(s.nodes))
	var connsMu sync.Mutex
	var readers sync.WaitGroup
	open := func(ctx context.Context, member, node int) {
		w := &watchConn{node: node}
		connsMu.Lock()
		conns = append(conns, w)
		connsMu.Unlock()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: watchAddr(member / per)}, Timeout: 10 * time.Second}
		c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(s.nodes[node].url, "http://"))
		if err == nil {
			_, err = c.Write(requests[node])
			if err != nil {
				c.Close()
			}
		}
		if err != nil {
			w.status.Store(-1)
			errs.add(err)
			return
		}
		w.conn = c
		readers.Go(func() {
			buf := make([]byte, 64)
			got, err := c.Read(buf)
			if code := parseStatusLine(buf[:got]); code != 0 {
				w.status.CompareAndSwap(0, int32(code))
				return
			}
			if w.status.CompareAndSwap(0, -1) && err != nil {
				errs.add(fmt.Errorf("closed without an answer: %w", err))
			}
		})
	}

	pr.logf("elanous: watches: opening %d blocking /v1/primary watches on each candidate (wait=%s, %d per source address, %d addresses; open-file limit %d)",
		n, watchWait, per, rep.Addresses, rep.FileLimit)
	t0 := time.Now()
	jobs := make(chan [2]int)
	var dialers sync.WaitGroup
	for range 64 {
		dialers.Go(func() {
			for j := range jobs {
				open(ctx, j[0], j[1])
			}
		})
	}
	last := time.Now()
	for m := 0; m < n && ctx.Err() == nil; m++ {
		for i := range s.nodes {
			jobs <- [2]int{m, i}
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			pr.logf("elanous: watches: opening %d/%d on each candidate", m+1, n)
		}
	}
	close(jobs)
	dialers.Wait()
	rep.OpenSeconds = time.Since(t0).Seconds()
	pr.logf("elanous: watches: all opened in %.1fs; holding them %s", rep.OpenSeconds, o.watchHold)

	hold := time.NewTimer(o.watchHold)
	select {
	case <-ctx.Done():
	case <-hold.C:
	}
	hold.Stop()
	rep.HoldSeconds = time.Since(t0).Seconds() - rep.OpenSeconds
	for i := range s.nodes {
		if text, err := s.metrics(ctx, i); err == nil {
			if v, ok, err := metricValue(text, "elanous_blocking_queries"); err == nil && ok {
				rep.Nodes[i].BlockingQueries = &v
			}
		}
	}
	rep.Peaks = smp.stop()
	for _, w := range conns {
		nd := &rep.Nodes[w.node]
		switch code := w.status.Load(); {
		case code == 0:
			nd.Held++
		case code == http.StatusTooManyRequests:
			nd.Refused++
		case code == http.StatusOK:
			nd.Answered++
		case code > 0:
			nd.OtherStatus++
		default:
			nd.Failed++
		}
	}
	for _, w := range conns {
		if w.conn != nil {
			w.status.CompareAndSwap(0, -2) // closed by us: not a failure
			w.conn.Close()
		}
	}
	readers.Wait()
	errs.mu.Lock()
	rep.ErrorKinds = errs.kinds
	errs.mu.Unlock()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, nd := range rep.Nodes {
		gauge := "—"
		if nd.BlockingQueries != nil {
			gauge = thousands(*nd.BlockingQueries)
		}
		pr.logf("elanous: watches: %s: %d held, %d refused (429), %d answered, %d other, %d failed; its count %s; RSS %s before, highest %s while held",
			nd.Node, nd.Held, nd.Refused, nd.Answered, nd.OtherStatus, nd.Failed, gauge, mib(nd.BaselineRSSBytes), mib(rep.Peaks[i].HighestRSS()))
	}
	if len(rep.ErrorKinds) > 0 {
		pr.logf("elanous: watches: failures: %v", rep.ErrorKinds)
	}
	return rep, nil
}
