package api

import (
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// listen caps ln's connections: at most ConnectionsPerAddress from one
// address (one past it is closed at once) and Connections overall
// (golang.org/x/net/netutil.LimitListener: past it Accept waits, and new
// connections wait in the kernel's queue).
func (g *guard) listen(ln net.Listener) net.Listener {
	per := &addressCapListener{Listener: ln, per: g.limits.ConnectionsPerAddress, open: map[string]int{}, refused: g.connRefused}
	return netutil.LimitListener(per, g.limits.Connections)
}

// addressCapListener closes a connection whose remote address already holds
// per open ones.
type addressCapListener struct {
	net.Listener
	per     int
	refused prometheus.Counter

	mu   sync.Mutex
	open map[string]int // guarded by mu
}

func (l *addressCapListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := addressKey(conn.RemoteAddr().String())
		l.mu.Lock()
		if l.open[key] >= l.per {
			l.mu.Unlock()
			l.refused.Inc()
			_ = conn.Close()
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &countedConn{Conn: conn, done: func() { l.closed(key) }}, nil
	}
}

func (l *addressCapListener) closed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// countedConn calls done once, at its first Close.
type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}
