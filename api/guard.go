package api

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/cluster"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
)

// Caps are one node's own abuse limits (config limits.*; ARCHITECTURE.md,
// "Abuse limits"). A zero field takes its DefaultCaps value. They are not
// replicated: the quotas every replica must agree on live in the state
// machine (fsm.Limits).
type Caps struct {
	// WriteRate is the sustained writes per second one machine token and one
	// remote address may make through this node; rate.Inf turns the rate
	// limits off. A request that fails authentication takes from its
	// address's bucket as a write does.
	WriteRate rate.Limit
	// WriteBurst is each bucket's size.
	WriteBurst int
	// Connections caps the open HTTP connections; past it new ones wait in
	// the kernel's accept queue.
	Connections int
	// ConnectionsPerAddress caps one remote address's open connections; one
	// past it is closed as soon as it is accepted.
	ConnectionsPerAddress int
	// BlockingQueries caps the blocking queries waiting at once; past it
	// they are answered 429 rate-limited.
	BlockingQueries int
	// BlockingQueriesPerAddress caps one remote address's.
	BlockingQueriesPerAddress int
	// AnonymousWait caps the wait of a /v1/primary blocking query without a
	// valid token (an authenticated one may wait MaxWait).
	AnonymousWait time.Duration
	// ForwardConnections caps the connections of the default forwarding
	// client to the leader (http.Transport.MaxConnsPerHost).
	ForwardConnections int
}

// DefaultCaps are the defaults of config limits.*: far above a fleet's
// needs (a seed member writes about once every 10 s and holds one blocking
// /v1/primary query per candidate; 10,000 of them stay under every cap).
func DefaultCaps() Caps {
	return Caps{
		WriteRate: 100, WriteBurst: 200,
		Connections: 32768, ConnectionsPerAddress: 256,
		BlockingQueries: 16384, BlockingQueriesPerAddress: 64,
		AnonymousWait: 30 * time.Second, ForwardConnections: 64,
	}
}

func (c Caps) withDefaults() Caps {
	d := DefaultCaps()
	if c.WriteRate == 0 {
		c.WriteRate = d.WriteRate
	}
	if c.WriteBurst == 0 {
		c.WriteBurst = d.WriteBurst
	}
	if c.Connections == 0 {
		c.Connections = d.Connections
	}
	if c.ConnectionsPerAddress == 0 {
		c.ConnectionsPerAddress = min(d.ConnectionsPerAddress, c.Connections)
	}
	if c.BlockingQueries == 0 {
		c.BlockingQueries = d.BlockingQueries
	}
	if c.BlockingQueriesPerAddress == 0 {
		c.BlockingQueriesPerAddress = min(d.BlockingQueriesPerAddress, c.BlockingQueries)
	}
	if c.AnonymousWait == 0 {
		c.AnonymousWait = d.AnonymousWait
	}
	if c.ForwardConnections == 0 {
		c.ForwardConnections = d.ForwardConnections
	}
	return c
}

// wire returns the caps as GET /v1/cluster/limits shows them.
func (c Caps) wire() *wire.NodeLimits {
	r := float64(c.WriteRate)
	if c.WriteRate == rate.Inf {
		r = 0
	}
	return &wire.NodeLimits{
		WriteRate: r, WriteBurst: c.WriteBurst, Connections: c.Connections, ConnectionsPerAddress: c.ConnectionsPerAddress,
		BlockingQueries: c.BlockingQueries, BlockingQueriesPerAddress: c.BlockingQueriesPerAddress,
		AnonymousWaitMs: c.AnonymousWait.Milliseconds(), ForwardConnections: c.ForwardConnections,
	}
}

// Rate of the forwards of unknown tokens from a lagging follower to the
// leader: a machine token issued a moment ago is rare, a flood of random
// ones must not reach the leader.
const (
	unknownTokenForwardRate  = 10
	unknownTokenForwardBurst = 20
)

// maxRateKeys bounds each rate limiter's table of buckets; see keyedLimiter.
const maxRateKeys = 1 << 16

// guard holds a server's abuse defences: the write rate limits, the caps on
// connections and blocking queries, and the set of peer addresses that tells
// a follower's forward from a client's request.
type guard struct {
	caps      Caps
	tokens    *keyedLimiter // per machine-token fingerprint; nil: off
	addresses *keyedLimiter // per remote address; nil: off
	// unknownForwards paces forwards of tokens this node does not know.
	unknownForwards *rate.Limiter
	blocking        *slots
	peers           *peerSet

	limited     *prometheus.CounterVec // elanous_rate_limited_total{scope}
	connRefused prometheus.Counter
	blockRefuse prometheus.Counter
}

func newGuard(caps Caps, node *cluster.Node, reg prometheus.Registerer) *guard {
	g := &guard{
		caps:            caps,
		unknownForwards: rate.NewLimiter(unknownTokenForwardRate, unknownTokenForwardBurst),
		blocking:        &slots{max: caps.BlockingQueries, perKey: caps.BlockingQueriesPerAddress, held: map[string]int{}},
		peers:           newPeerSet(node),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elanous_rate_limited_total",
			Help: "Requests refused 429 rate-limited by a write rate limit, by scope: token (a machine token's bucket) or address (a remote address's).",
		}, []string{"scope"}),
		connRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elanous_connections_refused_total",
			Help: "HTTP connections closed at accept because their remote address held limits.connections_per_address already.",
		}),
		blockRefuse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elanous_blocking_queries_refused_total",
			Help: "Blocking queries refused 429 because limits.blocking_queries or limits.blocking_queries_per_address was reached.",
		}),
	}
	if caps.WriteRate != rate.Inf {
		g.tokens = newKeyedLimiter(caps.WriteRate, caps.WriteBurst)
		g.addresses = newKeyedLimiter(caps.WriteRate, caps.WriteBurst)
	}
	g.limited.WithLabelValues("token")
	g.limited.WithLabelValues("address")
	reg.MustRegister(g.limited, g.connRefused, g.blockRefuse,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "elanous_blocking_queries", Help: "Blocking queries waiting on this node.",
		}, func() float64 { return float64(g.blocking.total()) }))
	return g
}

// errClientClosed ends a request whose client left while it waited (a
// blocking query given up): status 499, as nginx counts it, so that clients
// abandoning waits, a flood of them included, show as neither server errors
// nor error log lines.
var errClientClosed = &Error{Status: 499, Code: wire.CodeClientClosed, Message: "the client closed the request"}

// errRateLimited is the 429 of a write rate limit or a cap; the answer
// carries Retry-After.
func errRateLimited(msg string) *Error {
	return &Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited, Message: msg}
}

// refuse answers a request over a limit: 429 rate-limited with Retry-After
// (whole seconds, at least 1).
func refuse(c echo.Context, retry time.Duration, msg string) error {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
	return errRateLimited(msg)
}

// admitWrite is the rate limit of writes, after authentication and before
// the write middleware: a write with a machine token takes one token from
// that machine token's bucket. A write a follower forwards was charged there
// and is not charged again on the leader (the node a client talks to limits
// it, once). Authenticated writes are not limited by address: a fleet behind
// one NAT address shares it, and cluster tokens (admin, member, query) are
// shared by whole fleets; their harm is bounded by the replicated quotas.
// Only requests nobody is known for, failed or missing credentials, are
// limited per address (chargeAuthFailure).
func (s *Server) admitWrite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		g := s.guard
		if g.addresses == nil || g.peerForward(c.Request()) {
			return next(c)
		}
		if id := identity(c); id.Machine != "" {
			if ok, retry := g.tokens.allow(id.Owner, time.Now()); !ok {
				g.limited.WithLabelValues("token").Inc()
				return refuse(c, retry, "too many writes with this token; retry after the time in Retry-After")
			}
		}
		return next(c)
	}
}

// chargeAuthFailure takes a token from the bucket of the address of a
// request that failed authentication, so a flood of bad tokens is refused
// 429 (and neither logged in the audit log nor judged) once the bucket is
// empty. It returns the 429, or nil when the failure may be answered.
func (s *Server) chargeAuthFailure(c echo.Context) error {
	g := s.guard
	if g.addresses == nil || g.peerForward(c.Request()) {
		return nil
	}
	if ok, retry := g.addresses.allow(addressKey(c.Request().RemoteAddr), time.Now()); !ok {
		g.limited.WithLabelValues("address").Inc()
		return refuse(c, retry, "too many requests with bad credentials from this address")
	}
	return nil
}

// peerForward reports whether r is a forward from another candidate: it
// carries the forwarding header and comes from a candidate's address. A
// client that sets the header itself is still a client.
func (g *guard) peerForward(r *http.Request) bool {
	if r.Header.Get(wire.HeaderForwarded) == "" {
		return false
	}
	ip, ok := remoteIP(r.RemoteAddr)
	return ok && g.peers.contains(ip)
}

// clientAddress is the address of the client that sent r: the peer's, or
// for a forward from another candidate the client address it reports.
func (g *guard) clientAddress(r *http.Request) string {
	if fwd := r.Header.Get(wire.HeaderForwardedFor); fwd != "" && len(fwd) <= 64 && g.peerForward(r) {
		if _, err := netip.ParseAddrPort(fwd); err == nil {
			return fwd
		}
	}
	return r.RemoteAddr
}

// remoteIP parses the IP of a host:port remote address.
func remoteIP(remote string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// addressKey is the rate-limit and cap key of a remote address: its IPv4
// address, or its IPv6 /64 (one host commonly holds a whole /64).
func addressKey(remote string) string {
	ip, ok := remoteIP(remote)
	if !ok {
		if host, _, err := net.SplitHostPort(remote); err == nil {
			return host
		}
		return remote
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// keyedLimiter is one token bucket (golang.org/x/time/rate) per key. Its
// table is bounded: once it holds maxRateKeys buckets, full ones (which
// behave exactly as new ones) are dropped, and if none is full the table is
// emptied, forgetting debts rather than growing without bound.
type keyedLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter // guarded by mu
}

func newKeyedLimiter(limit rate.Limit, burst int) *keyedLimiter {
	return &keyedLimiter{limit: limit, burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from key's bucket at now. When none is left it
// reports false and how long until one is.
func (k *keyedLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		if len(k.buckets) >= maxRateKeys {
			k.pruneLocked(now)
		}
		b = rate.NewLimiter(k.limit, k.burst)
		k.buckets[key] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing / float64(k.limit) * float64(time.Second))
}

func (k *keyedLimiter) pruneLocked(now time.Time) {
	for key, b := range k.buckets {
		if b.TokensAt(now) >= float64(k.burst) {
			delete(k.buckets, key)
		}
	}
	if len(k.buckets) >= maxRateKeys {
		clear(k.buckets)
	}
}

// slots counts blocking queries waiting, overall and per key.
type slots struct {
	max, perKey int

	mu   sync.Mutex
	n    int            // guarded by mu
	held map[string]int // guarded by mu
}

// acquire takes a slot for key; ok is false when the node or the key holds
// all it may. release gives the slot back.
func (s *slots) acquire(key string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.max || s.held[key] >= s.perKey {
		return nil, false
	}
	s.n++
	s.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.n--
			if s.held[key]--; s.held[key] == 0 {
				delete(s.held, key)
			}
		})
	}, true
}

func (s *slots) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// listen caps ln's connections: at most ConnectionsPerAddress from one
// address (one past it is closed at once) and Connections overall
// (golang.org/x/net/netutil.LimitListener: past it Accept waits, and new
// connections wait in the kernel's queue).
func (g *guard) listen(ln net.Listener) net.Listener {
	per := &addressCapListener{Listener: ln, per: g.caps.ConnectionsPerAddress, open: map[string]int{}, refused: g.connRefused}
	return netutil.LimitListener(per, g.caps.Connections)
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

// peerRefresh is how often the peer set resolves the candidates' host names again.
const peerRefresh = 30 * time.Second

// peerSet is the set of the candidates' IP addresses: the hosts of their
// API URLs and Raft addresses as cluster.Node.Candidates lists them
// (ARCHITECTURE.md §9).
// Names are resolved in the background, at most every peerRefresh; IP
// literals count at once.
type peerSet struct {
	node *cluster.Node

	mu         sync.Mutex
	ips        map[netip.Addr]bool // guarded by mu
	at         time.Time           // guarded by mu: the last refresh
	refreshing bool                // guarded by mu
}

func newPeerSet(node *cluster.Node) *peerSet {
	p := &peerSet{node: node}
	p.ips, _ = p.literals()
	return p
}

// contains reports whether ip is a candidate's, starting a refresh when the
// set is stale.
func (p *peerSet) contains(ip netip.Addr) bool {
	p.mu.Lock()
	ok := p.ips[ip]
	stale := !p.refreshing && time.Since(p.at) > peerRefresh
	if stale {
		p.refreshing = true
	}
	p.mu.Unlock()
	if stale {
		go p.refresh()
	}
	return ok
}

// hosts lists the candidates' hosts.
func (p *peerSet) hosts() []string {
	if p.node == nil {
		return nil
	}
	var out []string
	add := func(rawURL, raftAddr string) {
		if u, err := url.Parse(rawURL); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
		if h, _, err := net.SplitHostPort(raftAddr); err == nil && h != "" {
			out = append(out, h)
		}
	}
	for _, c := range p.node.Candidates() {
		add(c.URL, c.Raft)
	}
	return out
}

// literals returns the IP literals among the hosts, and the names.
func (p *peerSet) literals() (map[netip.Addr]bool, []string) {
	ips := map[netip.Addr]bool{}
	var names []string
	for _, h := range p.hosts() {
		if ip, err := netip.ParseAddr(h); err == nil {
			ips[ip.Unmap()] = true
		} else {
			names = append(names, h)
		}
	}
	return ips, names
}

func (p *peerSet) refresh() {
	ips, names := p.literals()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ips[a.Unmap()] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ips, p.at, p.refreshing = ips, time.Now(), false
}
