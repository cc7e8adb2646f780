package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elanous/elanous-node/wire"
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
	// FileLimit is the holders' RLIMIT_NOFILE (one holder process per
	// candidate holds its watches).
	FileLimit uint64      `json:"fileLimit"`
	Nodes     []watchNode `json:"nodes"`
	// ErrorKinds counts the failures (dial errors, connections closed
	// without an answer) by their text.
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	Peaks      []nodePeak     `json:"peaks"`
	// LeaderChanges and TermChange are counted as in the calm run: a new
	// leader's claim changes the primary, which answers every watch.
	LeaderChanges int    `json:"leaderChanges"`
	TermChange    uint64 `json:"termChange"`
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
// once answered, -1 when the connection failed or closed without an answer,
// -2 once closed by the holder.
type watchConn struct {
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

// holderConfig is what the driver sends a watch holder: the candidate's
// address, the request each watch sends, and how many watches to open from
// how many per source address.
type holderConfig struct {
	Target     string `json:"target"`
	Request    string `json:"request"`
	Watches    int    `json:"watches"`
	PerAddress int    `json:"perAddress"`
}

// holderCounts is what a holder reports: its watches by outcome.
type holderCounts struct {
	Opened      bool           `json:"opened"`
	Held        int            `json:"held"`
	Refused     int            `json:"refused"`
	Answered    int            `json:"answered"`
	OtherStatus int            `json:"otherStatus"`
	Failed      int            `json:"failed"`
	ErrorKinds  map[string]int `json:"errorKinds,omitempty"`
	FileLimit   uint64         `json:"fileLimit"`
}

// watchSet is one holder's watches.
type watchSet struct {
	mu      sync.Mutex
	conns   []*watchConn // guarded by mu
	readers sync.WaitGroup
	errs    watchErrors
}

// open dials target from local, sends req and reads the answer's status line
// in its own goroutine.
func (ws *watchSet) open(ctx context.Context, target string, req []byte, local net.IP) {
	w := &watchConn{}
	ws.mu.Lock()
	ws.conns = append(ws.conns, w)
	ws.mu.Unlock()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", target)
	if err == nil {
		if _, err = c.Write(req); err != nil {
			c.Close()
		}
	}
	if err != nil {
		w.status.Store(-1)
		ws.errs.add(err)
		return
	}
	w.conn = c
	ws.readers.Go(func() {
		buf := make([]byte, 64)
		got, err := c.Read(buf)
		if code := parseStatusLine(buf[:got]); code != 0 {
			w.status.CompareAndSwap(0, int32(code))
			return
		}
		if w.status.CompareAndSwap(0, -1) && err != nil {
			ws.errs.add(fmt.Errorf("closed without an answer: %w", err))
		}
	})
}

// counts classifies the watches now.
func (ws *watchSet) counts() holderCounts {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var c holderCounts
	for _, w := range ws.conns {
		switch code := w.status.Load(); {
		case code == 0:
			c.Held++
		case code == http.StatusTooManyRequests:
			c.Refused++
		case code == http.StatusOK:
			c.Answered++
		case code > 0:
			c.OtherStatus++
		default:
			c.Failed++
		}
	}
	ws.errs.mu.Lock()
	c.ErrorKinds = maps.Clone(ws.errs.kinds)
	ws.errs.mu.Unlock()
	return c
}

// closeAll closes every watch and waits for their readers.
func (ws *watchSet) closeAll() {
	ws.mu.Lock()
	for _, w := range ws.conns {
		if w.conn != nil {
			w.status.CompareAndSwap(0, -2)
			w.conn.Close()
		}
	}
	ws.mu.Unlock()
	ws.readers.Wait()
}

// watchHolderFlag runs this program as a watch holder (runWatchHolder)
// instead of the benchmark.
const watchHolderFlag = "--watch-holder"

// runWatchHolder is a watch holder: a child process of the driver that holds
// one candidate's watches, so that no process needs more open files than
// one candidate's share (the driver cannot always raise its limit). It reads
// a holderConfig from in, opens the watches, writes {"opened":true}; at each
// line from in it writes its counts; when in ends it closes them and returns.
func runWatchHolder(ctx context.Context, in io.Reader, out io.Writer) error {
	rd := bufio.NewReader(in)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the holder's config: %w", err)
	}
	var cfg holderConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("decode the holder's config: %w", err)
	}
	if cfg.PerAddress < 1 {
		return errors.New("holder config: perAddress must be at least 1")
	}
	var limit uint64
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		limit = r.Cur
	}
	var ws watchSet
	defer ws.closeAll()
	jobs := make(chan int)
	var dialers sync.WaitGroup
	for range 64 {
		dialers.Go(func() {
			for m := range jobs {
				ws.open(ctx, cfg.Target, []byte(cfg.Request), watchAddr(m/cfg.PerAddress))
			}
		})
	}
	for m := 0; m < cfg.Watches && ctx.Err() == nil; m++ {
		jobs <- m
	}
	close(jobs)
	dialers.Wait()
	enc := json.NewEncoder(out)
	if err := enc.Encode(holderCounts{Opened: true, FileLimit: limit}); err != nil {
		return err
	}
	for {
		if _, err := rd.ReadBytes('\n'); err != nil {
			return nil // the driver closed our input: done
		}
		c := ws.counts()
		c.Opened, c.FileLimit = true, limit
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
}

// watchHolder is the driver's handle on one holder process.
type watchHolder struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *json.Decoder
	ended chan struct{}
}

// startHolder starts a holder for cfg (this same program, with
// watchHolderFlag) in its own process group with SIGKILL as its parent-death
// signal; its stderr goes to ours.
func startHolder(cfg holderConfig) (*watchHolder, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, watchHolderFlag)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a watch holder: %w", err)
	}
	h := &watchHolder{cmd: cmd, in: in, out: json.NewDecoder(out), ended: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.ended) }()
	data, err := json.Marshal(cfg)
	if err == nil {
		_, err = h.in.Write(append(data, '\n'))
	}
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("configure a watch holder: %w", err)
	}
	return h, nil
}

// next reads the holder's next counts.
func (h *watchHolder) next() (holderCounts, error) {
	var c holderCounts
	err := h.out.Decode(&c)
	return c, err
}

// report asks the holder for its counts.
func (h *watchHolder) report() (holderCounts, error) {
	if _, err := h.in.Write([]byte("report\n")); err != nil {
		return holderCounts{}, err
	}
	return h.next()
}

// stop closes the holder's input, so it closes its watches and exits, and
// kills it (by its pid) if it has not within 30 s.
func (h *watchHolder) stop() {
	h.in.Close()
	select {
	case <-h.ended:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.ended
	}
}

// runWatches opens the watches — one holder process per candidate — holds
// them for o.watchHold while sampling every node's footprint, counts what
// each candidate did with them and closes them.
func runWatches(ctx context.Context, s *elanousSystem, o options, pr *printer) (*watchReport, error) {
	n, per := o.watches, o.watchesPerAddress
	rep := &watchReport{PerCandidate: n, PerAddress: per, Addresses: (n + per - 1) / per, Wait: watchWait}
	token := s.queryToken
	if token == "" {
		token = s.token
	}
	base := s.sample()
	mark, err := s.markLeadership(ctx)
	if err != nil {
		return nil, err
	}
	var cfgs []holderConfig
	for i, node := range s.nodes {
		idx, err := s.primaryIndex(ctx, i)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(node.url)
		if err != nil {
			return nil, err
		}
		req := fmt.Sprintf("GET /v1/primary?index=%d&wait=%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUser-Agent: compare-etcd-watch\r\n\r\n", idx, watchWait, u.Host, token)
		cfgs = append(cfgs, holderConfig{Target: u.Host, Request: req, Watches: n, PerAddress: per})
		rep.Nodes = append(rep.Nodes, watchNode{Node: node.name, Index: idx, Asked: n, BaselineRSSBytes: base[i].RSSBytes})
	}
	smp := startSampler(ctx, o.sampleEvery, s.sample)
	stopped := false
	defer func() {
		if !stopped {
			smp.stop()
		}
	}()
	pr.logf("elanous: watches: opening %d blocking /v1/primary watches on each candidate (wait=%s, %d per source address, %d addresses), one holder process per candidate",
		n, watchWait, per, rep.Addresses)
	t0 := time.Now()
	var holders []*watchHolder
	defer func() {
		for _, h := range holders {
			h.stop()
		}
	}()
	for _, cfg := range cfgs {
		h, err := startHolder(cfg)
		if err != nil {
			return nil, err
		}
		holders = append(holders, h)
	}
	for i, h := range holders {
		c, err := h.next()
		if err != nil || !c.Opened {
			return nil, fmt.Errorf("the watch holder of %s: %v", s.nodes[i].name, err)
		}
		rep.FileLimit = max(rep.FileLimit, c.FileLimit)
	}
	rep.OpenSeconds = time.Since(t0).Seconds()
	pr.logf("elanous: watches: all sent in %.1fs (holders' open-file limit %d); holding them %s", rep.OpenSeconds, rep.FileLimit, o.watchHold)

	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.watchHold):
	}
	rep.HoldSeconds = time.Since(t0).Seconds() - rep.OpenSeconds
	for i := range s.nodes {
		if text, err := s.metrics(ctx, i); err == nil {
			if v, ok, err := metricValue(text, "elanous_blocking_queries"); err == nil && ok {
				rep.Nodes[i].BlockingQueries = &v
			}
		}
	}
	rep.Peaks = smp.stop()
	stopped = true
	for i, h := range holders {
		c, err := h.report()
		if err != nil {
			return nil, fmt.Errorf("the watch holder of %s: %w", s.nodes[i].name, err)
		}
		nd := &rep.Nodes[i]
		nd.Held, nd.Refused, nd.Answered, nd.OtherStatus, nd.Failed = c.Held, c.Refused, c.Answered, c.OtherStatus, c.Failed
		for k, v := range c.ErrorKinds {
			if rep.ErrorKinds == nil {
				rep.ErrorKinds = map[string]int{}
			}
			rep.ErrorKinds[k] += v
		}
	}
	if _, rep.LeaderChanges, rep.TermChange, err = s.leaderChangesSince(ctx, mark, rep.Peaks, "watches", pr); err != nil {
		return nil, err
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
