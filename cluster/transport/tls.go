package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Errors of the TLS transport.
var (
	// ErrPeerMismatch is the answer to an RPC whose header claims a server ID
	// other than the machine its connection's certificate names; the
	// connection is closed and the RPC never reaches raft.
	ErrPeerMismatch = errors.New("rpc sender does not match the peer certificate")
	// ErrUnknownPeerAddress is returned by a dial to a Raft address no
	// candidate has: the dialler could not tell which certificate to expect.
	ErrUnknownPeerAddress = errors.New("no candidate has this raft address")
)

// maxHandshakes bounds the inbound TLS handshakes in progress; a connection
// over the bound is closed at once.
const maxHandshakes = 64

// TLSConfig configures NewTLS.
type TLSConfig struct {
	BindAddr  string
	Advertise string
	Certs     *certs.Store
	// Peers returns the current candidates: the machines allowed to connect,
	// and the Raft address of each, which tells a dial which certificate to
	// expect. It is called at every connection, so the set may change.
	Peers   func() []Peer
	Timeout time.Duration // raft's I/O deadline per RPC
	Logger  *slog.Logger
	HCLog   hclog.Logger
	// OnDrop, when set, is called once per admitted connection whose Read
	// or Write fails (see TCPStream: a dead leader's connections fail at
	// once).
	OnDrop func()
}

// TLS is the Raft transport over mutual TLS.
//
// Outgoing RPCs go through an ordinary raft.NetworkTransport whose stream
// layer (tlsDialer) dials with TLS and accepts nothing. Incoming connections
// are accepted here: the TLS handshake must present a certificate of the
// cluster CA naming exactly one current candidate, or the connection is
// closed before a byte of Raft is read, with one log line giving the remote
// address and the reason. Each admitted connection is then served by a
// raft.NetworkTransport of its own (decoding stays raft's), whose RPCs are
// relayed to Consumer only when their header names the same machine as the
// certificate: a certificate for node-b cannot speak as node-a.
//
// Heartbeats of the inner transports have no fast-path handler, so they
// reach raft's main loop through Consumer like every other RPC (see
// mainThreadHeartbeats).
type TLS struct {
	*raft.NetworkTransport // outgoing RPCs, LocalAddr, EncodePeer/DecodePeer

	cfg       TLSConfig
	ln        net.Listener
	dialer    *tlsDialer
	serverTLS *tls.Config
	consumeCh chan raft.RPC
	done      chan struct{}
	closeOnce sync.Once
	slots     chan struct{} // handshakes in progress
	wg        sync.WaitGroup
	conns     connSet // by their raw TCP connection
}

// NewTLS listens on cfg.BindAddr and returns the transport.
func NewTLS(cfg TLSConfig) (*TLS, error) {
	adv, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", cfg.Advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not dialable", cfg.Advertise)
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", cfg.BindAddr, err)
	}
	t := &TLS{
		cfg:       cfg,
		ln:        ln,
		serverTLS: cfg.Certs.ServerConfig(tls.RequireAndVerifyClientCert),
		consumeCh: make(chan raft.RPC),
		done:      make(chan struct{}),
		slots:     make(chan struct{}, maxHandshakes),
	}
	t.dialer = &tlsDialer{idleListener: newIdleListener(adv), t: t}
	t.NetworkTransport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: t.dialer, MaxPool: 3, Timeout: cfg.Timeout, Logger: cfg.HCLog,
	})
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Dial connects to a peer's Raft address as the transport's own dials do:
// TLS with the certificate the peer's machine must present (fast failover's
// probe of the leader uses it, so a live leader does not log a refused
// connection).
func (t *TLS) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return t.dialer.Dial(raft.ServerAddress(addr), timeout)
}

// Consumer returns the RPCs of every admitted connection.
func (t *TLS) Consumer() <-chan raft.RPC { return t.consumeCh }

// SetHeartbeatHandler ignores the fast path: see mainThreadHeartbeats.
func (t *TLS) SetHeartbeatHandler(func(raft.RPC)) {}

// Close stops accepting, closes every connection and the outgoing transport.
func (t *TLS) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		_ = t.ln.Close()
		_ = t.NetworkTransport.Close()
		t.conns.closeAll()
		t.wg.Wait()
	})
	return nil
}

// refuse logs one refused connection.
func (t *TLS) refuse(remote net.Addr, reason string) {
	t.cfg.Logger.Warn("raft connection refused", "remote", remote.String(), "reason", reason)
}

func (t *TLS) accept() {
	defer t.wg.Done()
	delay := 5 * time.Millisecond
	for {
		raw, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.done:
				return
			case <-time.After(delay):
			}
			t.cfg.Logger.Error("raft accept failed", "err", err)
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		select {
		case t.slots <- struct{}{}:
		default:
			t.refuse(raw.RemoteAddr(), fmt.Sprintf("more than %d TLS handshakes in progress", maxHandshakes))
			_ = raw.Close()
			continue
		}
		if !t.conns.track(raw) {
			_ = raw.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.admit(raw)
		}()
	}
}

// admit runs the handshake and the name check of one inbound connection and
// hands it to a NetworkTransport of its own, or closes it.
func (t *TLS) admit(raw net.Conn) {
	conn := tls.Server(raw, t.serverTLS)
	_ = raw.SetDeadline(time.Now().Add(certs.HandshakeTimeout))
	err := conn.Handshake()
	<-t.slots
	if err != nil {
		t.refuse(raw.RemoteAddr(), "tls handshake: "+err.Error())
		t.drop(raw)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	machine, err := peerMachine(conn.ConnectionState().PeerCertificates[0], t.cfg.Peers())
	if err != nil {
		t.refuse(raw.RemoteAddr(), err.Error())
		t.drop(raw)
		return
	}
	ic := &inboundConn{Conn: conn, raw: raw, t: t, closed: make(chan struct{})}
	inner := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &oneConnListener{idleListener: newIdleListener(t.ln.Addr()), conn: ic},
		MaxPool: 1, Timeout: t.cfg.Timeout, Logger: t.cfg.HCLog,
	})
	t.relay(inner, ic, machine)
}

func (t *TLS) drop(raw net.Conn) {
	_ = raw.Close()
	t.conns.untrack(raw)
}

// relay passes the RPCs of one admitted connection to Consumer while their
// header names the certificate's machine; on the first that does not, it
// closes the connection and answers ErrPeerMismatch.
func (t *TLS) relay(inner *raft.NetworkTransport, ic *inboundConn, machine string) {
	defer func() {
		_ = ic.Close()
		_ = inner.Close()
	}()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-inner.Consumer():
		case <-ic.closed:
			return
		case <-t.done:
			return
		}
		if id := rpcSender(rpc.Command); id != machine {
			t.refuse(ic.RemoteAddr(), fmt.Sprintf("certificate names %s but the %s claims to come from %q", machine, rpcName(rpc.Command), id))
			_ = ic.Close()
			rpc.Respond(nil, ErrPeerMismatch)
			return
		}
		select {
		case t.consumeCh <- rpc:
		case <-ic.closed:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		case <-t.done:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
}

// rpcSender returns the server ID an RPC's header claims.
func rpcSender(cmd any) string {
	if h, ok := cmd.(raft.WithRPCHeader); ok {
		return string(h.GetRPCHeader().ID)
	}
	return ""
}

func rpcName(cmd any) string {
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		return "AppendEntries"
	case *raft.RequestVoteRequest:
		return "RequestVote"
	case *raft.RequestPreVoteRequest:
		return "RequestPreVote"
	case *raft.InstallSnapshotRequest:
		return "InstallSnapshot"
	case *raft.TimeoutNowRequest:
		return "TimeoutNow"
	}
	return fmt.Sprintf("%T", cmd)
}

// peerMachine returns the candidate a verified peer certificate is for: its
// DNS names must include exactly one candidate's machine.
func peerMachine(leaf *x509.Certificate, cands []Peer) (string, error) {
	var named []string
	for _, c := range cands {
		if slices.Contains(leaf.DNSNames, c.Machine) {
			named = append(named, c.Machine)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return "", fmt.Errorf("certificate %q (names %v) names no candidate", leaf.Subject.CommonName, leaf.DNSNames)
	}
	return "", fmt.Errorf("certificate %q names several candidates %v", leaf.Subject.CommonName, named)
}

// inboundConn is an admitted connection; closing it (raft's handler does when
// it stops) stops its relay.
type inboundConn struct {
	*tls.Conn
	raw      net.Conn
	t        *TLS
	once     sync.Once
	dropOnce sync.Once
	closed   chan struct{}
}

// Read and Write report the first failure to OnDrop (see watchedConn).
func (c *inboundConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.dropped(err)
	return n, err
}

func (c *inboundConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.dropped(err)
	return n, err
}

func (c *inboundConn) dropped(err error) {
	if err != nil && c.t.cfg.OnDrop != nil {
		c.dropOnce.Do(c.t.cfg.OnDrop)
	}
}

func (c *inboundConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		_ = c.Conn.Close()
		c.t.conns.untrack(c.raw)
	})
	return nil
}

// idleListener is the listening half of a stream layer that accepts
// nothing: Accept blocks until Close.
type idleListener struct {
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func newIdleListener(addr net.Addr) idleListener {
	return idleListener{addr: addr, done: make(chan struct{})}
}

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *idleListener) Addr() net.Addr { return l.addr }

// oneConnListener is the stream layer of an inner NetworkTransport: Accept
// yields its one connection, then blocks until Close.
type oneConnListener struct {
	idleListener
	mu   sync.Mutex
	conn net.Conn // guarded by mu; nil once accepted
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return l.idleListener.Accept()
}

func (l *oneConnListener) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	return nil, errors.New("inbound-only stream layer")
}

// tlsDialer is the stream layer of the outgoing NetworkTransport: it dials
// peers with TLS and never accepts.
type tlsDialer struct {
	idleListener
	t *TLS
}

// Dial connects to the candidate at address and completes a TLS handshake
// that requires the peer's certificate to chain to the cluster CA and to
// name that candidate's machine, and no other candidate.
func (d *tlsDialer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	machine := ""
	for _, c := range d.t.cfg.Peers() {
		if c.Raft == string(address) {
			machine = c.Machine
			break
		}
	}
	if machine == "" {
		return nil, fmt.Errorf("dial %s: %w", address, ErrUnknownPeerAddress)
	}
	select {
	case <-d.t.done:
		return nil, fmt.Errorf("dial %s: %w", address, net.ErrClosed)
	default:
	}
	raw, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	cfg := d.t.cfg.Certs.ClientConfig(machine)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		got, err := peerMachine(cs.PeerCertificates[0], d.t.cfg.Peers())
		if err != nil {
			return err
		}
		if got != machine {
			return fmt.Errorf("certificate names %s, want %s", got, machine)
		}
		return nil
	}
	conn := tls.Client(raw, cfg)
	_ = raw.SetDeadline(time.Now().Add(min(timeout, certs.HandshakeTimeout)))
	if err := conn.Handshake(); err != nil {
		_ = raw.Close()
		d.t.cfg.Logger.Warn("raft dial refused", "remote", string(address), "peer", machine, "reason", "tls handshake: "+err.Error())
		return nil, fmt.Errorf("dial %s (%s): %w", machine, address, err)
	}
	_ = raw.SetDeadline(time.Time{})
	if !d.t.conns.track(raw) {
		_ = conn.Close()
		return nil, fmt.Errorf("dial %s: %w", address, net.ErrClosed)
	}
	return &trackedConn{Conn: conn, raw: raw, set: &d.t.conns}, nil
}
