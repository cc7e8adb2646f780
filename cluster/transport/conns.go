package transport

import (
	"net"
	"sync"
)

// connSet holds the open connections of a stream layer or transport, inbound
// and dialed, so that closing the layer closes them all: a closed layer then
// looks from outside as a dead process does. The zero value is open and
// empty.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{} // guarded by mu
	closed bool                  // guarded by mu
}

// track registers an open connection; it reports false (and the caller
// closes the connection) once the set is closed.
func (s *connSet) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

// untrack forgets a connection that was closed.
func (s *connSet) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// isClosed reports whether closeAll was called.
func (s *connSet) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// closeAll closes every tracked connection; later track calls report false.
func (s *connSet) closeAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.closed = nil, true
	s.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// trackedConn is a connection of a set that leaves it when closed; raw is
// the connection the set tracks (c itself, or the TCP connection under it).
type trackedConn struct {
	net.Conn
	raw  net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.set.untrack(c.raw) })
	return err
}
