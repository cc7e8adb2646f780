package api

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
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
	g := newGuard(Caps{ConnectionsPerAddress: 2, Connections: 10}.withDefaults(), nil, prometheus.NewRegistry())
	ln := g.listen(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
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

// The default forwarding client holds at most Caps.ForwardConnections
// connections to the leader.
func TestNew_ForwardConnections(t *testing.T) {
	for _, tt := range []struct{ caps, want int }{{0, DefaultCaps().ForwardConnections}, {7, 7}} {
		s := New(Deps{Caps: Caps{ForwardConnections: tt.caps}})
		tr, ok := s.client.Transport.(*http.Transport)
		if !ok || tr.MaxConnsPerHost != tt.want {
			t.Errorf("New(ForwardConnections %d): forwarding transport %T with MaxConnsPerHost %d, want %d", tt.caps, s.client.Transport, tr.MaxConnsPerHost, tt.want)
		}
	}
}
