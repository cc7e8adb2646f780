package transport

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// TCPStream is the stream layer of the plaintext Raft transport: raft's
// TCPStreamLayer, plus two things it lacks.
//
//   - Every accepted connection reports, once, the first Read or Write that
//     fails (onDrop). A leader's process that dies has its sockets closed by the
//     kernel, so its followers read EOF or a reset on the connections it made
//     to them at once, long before their heartbeat timers run out; fast
//     failover (cluster/leader_failover.go) starts from that report.
//   - Close closes every connection the layer accepted or dialed, and later
//     dials fail. raft's NetworkTransport.Close closes only the listener, so
//     a closed transport kept its pooled connections and the handlers of
//     inbound ones blocked in Read until the peer closed them. With this
//     Close, a closed transport looks from outside as a dead process does.
type TCPStream struct {
	ln        net.Listener
	advertise net.Addr
	onDrop    func() // nil: no reports
	conns     connSet
}

// NewTCPStream listens on bind and returns the stream layer; advertise must
// be a dialable TCP address (raft puts it in every RPC header).
func NewTCPStream(bind string, advertise *net.TCPAddr, onDrop func()) (*TCPStream, error) {
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %s is not dialable", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return &TCPStream{ln: ln, advertise: advertise, onDrop: onDrop}, nil
}

// Accept returns the next inbound connection, wrapped to report a failed Read.
func (s *TCPStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	conn := c
	if s.onDrop != nil {
		conn = &watchedConn{Conn: c, onDrop: s.onDrop}
	}
	if !s.conns.track(conn) {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	return &trackedConn{Conn: conn, raw: conn, set: &s.conns}, nil
}

// Dial connects to a peer; it fails once the layer is closed.
func (s *TCPStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.conns.isClosed() {
		return nil, fmt.Errorf("dial %s: %w", address, net.ErrClosed)
	}
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	if !s.conns.track(c) {
		_ = c.Close()
		return nil, fmt.Errorf("dial %s: %w", address, net.ErrClosed)
	}
	return &trackedConn{Conn: c, raw: c, set: &s.conns}, nil
}

// Close closes the listener and every open connection.
func (s *TCPStream) Close() error {
	err := s.ln.Close()
	s.conns.closeAll()
	return err
}

// Addr is the advertised address (raft's RPC headers carry it).
func (s *TCPStream) Addr() net.Addr { return s.advertise }

// CloseListener stops accepting connections and leaves the open ones as
// they are, so another listener can take the address over while the peers'
// connections still stand (a paused or black-holed process, as the peers see
// it).
func (s *TCPStream) CloseListener() error { return s.ln.Close() }

// watchedConn calls onDrop at the first Read or Write that fails: the peer
// closed or reset the connection, or this side closed it. Both count: raft
// reads the next request only once it has answered the last, so a peer that
// dies while its request is being served shows only in the answer's Write
// (raft's "failed to flush response"), and the handler closes the
// connection without reading again.
type watchedConn struct {
	net.Conn
	onDrop func()
	once   sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(c.onDrop)
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.once.Do(c.onDrop)
	}
	return n, err
}

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
