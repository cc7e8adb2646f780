package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

// A /v1/primary blocking query that has to wait is parked: its connection is
// taken from net/http (Hijack), and the request's goroutine, its buffers and
// its echo context are given back at once. What stays while it waits is the
// connection, one small record and one goroutine reading a single byte to
// notice the client leaving, a few KiB where the handler's wait held about
// 20 KiB (a member fleet holds one such query per member on every
// candidate). When the primary changes, or the wait runs out, the answer is
// written on the connection by hand (the same status, headers and body the
// handler writes), and the connection goes back to the HTTP server through
// the listener (reacceptListener), so the client's keep-alive connection
// carries on as if the handler had answered.
//
// A query that cannot be parked (HTTP/2, a server not started through
// Serve) waits in its handler as before.

// parking holds the parked queries of one server.
type parking struct {
	s        *Server
	reaccept *reacceptListener

	mu      sync.Mutex
	watches map[*parkedQuery]struct{} // guarded by mu
	closed  bool                      // guarded by mu
	done    chan struct{}
}

// parkedQuery is one parked blocking query.
type parkedQuery struct {
	p       *parking
	conn    net.Conn
	seen    uint64
	header  http.Header // the headers the middleware set before the handler
	pretty  bool
	close   bool // answer with Connection: close, then close
	release func()
	timer   *time.Timer // guarded by p.mu
	done    requestDone // the metrics' record, counted at the end

	// state is parked, then answered or dropped, once.
	state    atomic.Int32
	readDone chan struct{} // closed when the reader has returned
	gotByte  atomic.Bool   // the reader read a byte: the client sent more
}

const (
	queryParked int32 = iota
	queryAnswered
	queryDropped
)

// aLongTimeAgo is a deadline in the past: it ends a blocked Read at once.
var aLongTimeAgo = time.Unix(1, 0)

func newParking(s *Server, ln *reacceptListener) *parking {
	p := &parking{s: s, reaccept: ln, watches: map[*parkedQuery]struct{}{}, done: make(chan struct{})}
	go p.dispatch()
	return p
}

// errParked ends a handler whose query was parked: the answer comes later,
// on the connection.
var errParked = errors.New("api: blocking query parked")

// park takes the connection of c and parks its query; release frees its
// blocking-query slot once it is answered or dropped. ok is false when the
// connection cannot be taken; the caller then waits in the handler.
func (p *parking) park(c echo.Context, seen uint64, wait time.Duration, release func()) (ok bool) {
	r := c.Request()
	if p == nil || r.ProtoMajor != 1 || r.Method != http.MethodGet {
		return false
	}
	header := c.Response().Header().Clone()
	conn, brw, err := http.NewResponseController(c.Response().Writer).Hijack()
	if err != nil {
		return false
	}
	q := &parkedQuery{
		p: p, conn: conn, seen: seen, header: header, release: release,
		// A byte already buffered is a pipelined request: answer, then close.
		close:    r.Close || r.ProtoMinor == 0 || brw.Reader.Buffered() > 0,
		readDone: make(chan struct{}),
	}
	_, q.pretty = r.URL.Query()["pretty"]
	start, _ := c.Get(requestStartKey).(time.Time)
	q.done = requestOf(c, start)
	c.Set(parkedKey, q)
	_ = conn.SetDeadline(time.Time{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		q.state.Store(queryDropped)
		_ = conn.Close()
		release()
		return true
	}
	// The timer may fire at once: a query answered already is not kept
	// (answer's forget takes mu, so it cannot run between the check and the
	// insert, and it reads the timer under mu).
	q.timer = time.AfterFunc(wait, q.answer)
	if q.state.Load() == queryParked {
		p.watches[q] = struct{}{}
	}
	p.mu.Unlock()
	go q.read()
	// The primary may have changed between the handler's check and now.
	if index, _ := p.s.node.FSM().Watch(fsm.TablePrimary); index > seen {
		go q.answer()
	}
	return true
}

// read waits for the client: a closed connection drops the query; a byte
// (the client sent more while it waited) stops the watch for a close, and
// the query is answered with Connection: close.
func (q *parkedQuery) read() {
	defer close(q.readDone)
	var b [1]byte
	n, _ := q.conn.Read(b[:])
	if n > 0 {
		q.gotByte.Store(true)
		return
	}
	q.drop()
}

// drop closes a query whose client left (or the server stops).
func (q *parkedQuery) drop() {
	if !q.state.CompareAndSwap(queryParked, queryDropped) {
		return
	}
	q.forget()
	_ = q.conn.Close()
	q.observe(errClientClosed.Status, 0)
}

// observe counts the query in the request metrics (and the access log).
func (q *parkedQuery) observe(status int, bytes int64) {
	if m := q.p.s.metrics; m != nil {
		d := q.done
		d.status, d.bytes = status, bytes
		m.observe(d)
	}
}

// parkedKey marks a request whose query is parked, for the metrics
// middleware.
const parkedKey = "elanous.parked"

func (q *parkedQuery) forget() {
	q.p.mu.Lock()
	delete(q.p.watches, q)
	timer := q.timer
	q.p.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	q.release()
}

// answer writes the query's answer and hands the connection back to the
// HTTP server (or closes it).
func (q *parkedQuery) answer() {
	if !q.state.CompareAndSwap(queryParked, queryAnswered) {
		return
	}
	q.forget()
	// Stop the reader before the connection is handed on.
	_ = q.conn.SetReadDeadline(aLongTimeAgo)
	<-q.readDone
	_ = q.conn.SetReadDeadline(time.Time{})
	closing := q.close || q.gotByte.Load()
	_ = q.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	size, err := q.p.s.writePrimary(q.conn, q.header, q.pretty, closing)
	q.observe(http.StatusOK, size)
	if err != nil || closing {
		_ = q.conn.Close()
		return
	}
	_ = q.conn.SetWriteDeadline(time.Time{})
	q.p.reaccept.give(q.conn)
}

// dispatch answers the parked queries the primary's changes concern.
func (p *parking) dispatch() {
	for {
		index, ch := p.s.node.FSM().Watch(fsm.TablePrimary)
		var ready []*parkedQuery
		p.mu.Lock()
		for q := range p.watches {
			if index > q.seen {
				ready = append(ready, q)
			}
		}
		p.mu.Unlock()
		for _, q := range ready {
			go q.answer()
		}
		select {
		case <-ch:
		case <-p.done:
			return
		}
	}
}

// close answers every parked query with Connection: close (the server is
// shutting down: a member hears the primary it knows and moves on) and parks
// no more.
func (p *parking) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	all := make([]*parkedQuery, 0, len(p.watches))
	for q := range p.watches {
		q.close = true
		all = append(all, q)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, q := range all {
		wg.Go(q.answer)
	}
	wg.Wait()
}

// parked is how many queries are parked now.
func (p *parking) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// writePrimary writes getPrimary's answer to w as an HTTP/1.1 response: the
// headers of header plus the read headers, and the JSON body echo would
// write. It returns the body's size.
func (s *Server) writePrimary(w io.Writer, header http.Header, pretty, closing bool) (int64, error) {
	h := header.Clone()
	s.setReadHeaders(h, fsm.TablePrimary)
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	var body []byte
	if pretty {
		body, _ = json.MarshalIndent(s.primary(), "", "  ")
	} else {
		body, _ = json.Marshal(s.primary())
	}
	body = append(body, '\n')
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	if closing {
		h.Set("Connection", "close")
	}
	resp := &http.Response{
		StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, Header: h,
		ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body)), Close: closing,
	}
	defer resp.Body.Close()
	return resp.ContentLength, resp.Write(w)
}

// reacceptListener is the API's listener with a way back in: Accept returns
// the connections of the listener under it and those given back by parked
// queries once answered.
type reacceptListener struct {
	net.Listener
	back     chan net.Conn
	accepted chan acceptResult
	done     chan struct{}
	once     sync.Once
}

type acceptResult struct {
	conn net.Conn
	err  error
}

func newReacceptListener(ln net.Listener) *reacceptListener {
	l := &reacceptListener{Listener: ln, back: make(chan net.Conn), accepted: make(chan acceptResult), done: make(chan struct{})}
	go l.pump()
	return l
}

func (l *reacceptListener) pump() {
	for {
		conn, err := l.Listener.Accept()
		select {
		case l.accepted <- acceptResult{conn, err}:
		case <-l.done:
			if conn != nil {
				_ = conn.Close()
			}
			return
		}
	}
}

func (l *reacceptListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.accepted:
		return r.conn, r.err
	case conn := <-l.back:
		return conn, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// give hands an answered connection back to the server; after Close it is
// closed instead.
func (l *reacceptListener) give(conn net.Conn) {
	select {
	case l.back <- conn:
	case <-l.done:
		_ = conn.Close()
	}
}

func (l *reacceptListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}
