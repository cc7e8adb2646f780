package api

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/wire"
)

func TestAddressKey(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"10.0.0.1:31413", "10.0.0.1"},
		{"[::ffff:10.0.0.1]:5", "10.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"pipe", "pipe"},
	}
	for _, tt := range tests {
		if got := addressKey(tt.remote); got != tt.want {
			t.Errorf("addressKey(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

func TestKeyedLimiter_Allow(t *testing.T) {
	k := newKeyedLimiter(2, 3) // 2 per second, bursts of 3
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := k.allow("a", now); !ok {
			t.Fatalf("allow #%d of the burst = false", i+1)
		}
	}
	ok, retry := k.allow("a", now)
	if ok || retry <= 0 || retry > 500*time.Millisecond {
		t.Errorf("allow past the burst = %v, retry %v; want false and at most half a second", ok, retry)
	}
	if ok, _ := k.allow("b", now); !ok {
		t.Errorf("another key's first allow = false")
	}
	if ok, _ := k.allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Errorf("allow after the refill = false")
	}
}

// The table of buckets never exceeds maxRateKeys: full buckets go first.
func TestKeyedLimiter_Bounded(t *testing.T) {
	k := newKeyedLimiter(rate.Every(time.Hour), 1)
	now := time.Unix(1000, 0)
	for i := range maxRateKeys + 10 {
		k.allow(string(rune(i)), now)
	}
	if n := len(k.buckets); n > maxRateKeys {
		t.Errorf("buckets = %d, want at most %d", n, maxRateKeys)
	}
}

// The listener closes a connection past the per-address cap at once and
// counts it; a closed connection frees its place.
func TestGuard_ListenCapsPerAddress(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(withDefaults(wire.NodeLimits{ConnectionsPerAddress: 2, Connections: 10}), nil, prometheus.NewRegistry())
	ln := g.listen(raw)
	defer ln.Close()
	accepted := acceptInto(ln, 10)
	dial := func(ip string) net.Conn {
		t.Helper()
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	from := func(c net.Conn) string { return c.RemoteAddr().(*net.TCPAddr).IP.String() }
	dial("127.0.0.2")
	dial("127.0.0.2")
	first, second := <-accepted, <-accepted
	third := dial("127.0.0.2")
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("third connection from one address read %d, %v; want it closed", n, err)
	}
	dial("127.0.0.3")
	if got := <-accepted; from(got) != "127.0.0.3" {
		t.Errorf("accepted a connection from %s, want 127.0.0.3's", from(got))
	}
	if v := testutil.ToFloat64(g.connRefused); v != 1 {
		t.Errorf("connections refused = %v, want 1", v)
	}
	// Closing one of 127.0.0.2's connections frees a place for it.
	_ = first.Close()
	dial("127.0.0.2")
	if got := <-accepted; from(got) != "127.0.0.2" {
		t.Errorf("accepted a connection from %s, want 127.0.0.2's", from(got))
	}
	_ = second.Close()
}

// The listener holds at most Limits.Connections open connections overall, from
// any mix of addresses: past the cap Accept waits (the connection stays in the
// accept queue, not refused), and one is accepted once another closes. Run in
// a synctest bubble over an in-memory listener, so "Accept waits" is checked
// exactly: synctest.Wait returns once the accepting goroutine is durably
// blocked, which with a cap it is on the cap's semaphore and without one only
// after it accepted every queued connection.
func TestGuard_ListenCapsOverall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(withDefaults(wire.NodeLimits{Connections: 2}), nil, prometheus.NewRegistry())
		queue := &queueListener{conns: make(chan net.Conn, 4), closed: make(chan struct{})}
		ln := g.listen(queue)
		defer ln.Close() // ends the accepting goroutine, also when the test fails
		accepted := acceptInto(ln, 4)
		for i := range 3 { // three addresses: no per-address cap is reached
			server, client := net.Pipe()
			defer client.Close()
			queue.conns <- remoteConn{Conn: server, remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i)), Port: 40000}}
		}
		synctest.Wait()
		if len(accepted) != 2 || len(queue.conns) != 1 {
			t.Fatalf("with a cap of 2 and 3 connections waiting: %d accepted, %d still queued; want 2 and 1", len(accepted), len(queue.conns))
		}
		first, second := <-accepted, <-accepted
		defer second.Close()
		_ = first.Close()
		synctest.Wait()
		if len(accepted) != 1 {
			t.Fatalf("after one of 2 closed: %d more accepted, want 1", len(accepted))
		}
		third := <-accepted
		defer third.Close()
		if got := third.RemoteAddr().String(); got != "127.0.0.4:40000" {
			t.Errorf("accepted %s, want the queued 127.0.0.4:40000", got)
		}
		if v := testutil.ToFloat64(g.connRefused); v != 0 {
			t.Errorf("connections refused = %v, want 0 (the overall cap waits, it does not refuse)", v)
		}
	})
}

// queueListener accepts the connections sent on conns.
type queueListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *queueListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *queueListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *queueListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 31413} }

// remoteConn is a connection from remote.
type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }

// The default forwarding client holds at most Limits.ForwardConnections
// connections to the leader.
func TestNew_ForwardConnections(t *testing.T) {
	for _, tt := range []struct{ caps, want int }{{0, defaults.ForwardConnections}, {7, 7}} {
		s := New(Deps{Limits: wire.NodeLimits{ForwardConnections: tt.caps}})
		tr, ok := s.client.Transport.(*http.Transport)
		if !ok || tr.MaxConnsPerHost != tt.want {
			t.Errorf("New(ForwardConnections %d): forwarding transport %T with MaxConnsPerHost %d, want %d", tt.caps, s.client.Transport, tr.MaxConnsPerHost, tt.want)
		}
	}
}

// acceptInto accepts from ln until Accept fails, into a channel of capacity n.
func acceptInto(ln net.Listener, n int) <-chan net.Conn {
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}
