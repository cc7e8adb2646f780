package api

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Band is an inclusive range of ports.
type Band struct{ Start, End int }

// Deps are what a Server needs.
type Deps struct {
	Node   *cluster.Node
	Tokens wire.TokensFile // the cluster tokens (admin, member, query)
	// Band is the test band leases are drawn from; default 31450-31499.
	Band Band
	// MetricsAuth makes /metrics require the query scope.
	MetricsAuth bool
	Logger      *slog.Logger
	// Registry receives the API's and the node's metrics; default a new one.
	Registry *prometheus.Registry
	// Client forwards writes to the leader; default a pooled client (over
	// TLS, verifying the leader against TLS's CA, when TLS is set).
	Client *http.Client
	// Rand is the random source of lease ids and machine tokens; default
	// crypto/rand.Reader. Only the leader draws from it.
	Rand io.Reader
	// TLS, when set, makes the API HTTPS with these certificates; Serve
	// reads them at each handshake, so a reload reaches new connections.
	TLS *certs.Store
	// VerifyClients makes the HTTPS API require a client certificate of the
	// CA as well as a token (tls.verify_incoming_api).
	VerifyClients bool
	// Limits are this node's own abuse limits (config limits.*, decoded
	// into this type); a zero cap takes its config default,
	// and WriteRate 0 turns the rate limits off (withDefaults).
	Limits wire.NodeLimits
	// Audit receives the audit log (see Auditor); default Logger with
	// audit=true on every line.
	Audit *slog.Logger
	// Version is the build's version, reported by /v1/cluster/status and
	// in snapshot files.
	Version string
	// Lagging, when set, is asked instead of Node.Lagging whether this node
	// lags, when it decides whether to let the leader judge a token it does
	// not know (forwardUnknownToken); nil: Node.Lagging.
	Lagging func() bool
	// EventPing is how long an event stream stays silent before the node
	// writes a ": ping" comment; default 15 s.
	EventPing time.Duration
	// EventWriteTimeout bounds each write to an event stream's client; past
	// it the stream ends. Default 10 s.
	EventWriteTimeout time.Duration
}

// Server is the HTTP API of one candidate.
type Server struct {
	node          *cluster.Node
	clusterTokens atomic.Pointer[[]clusterToken] // swapped by SetTokens
	// peerToken is the weakest cluster token this node holds (query,
	// else member, else admin): it authenticates the node's own requests
	// to the leader (confirm.go). Swapped by SetTokens; never logged.
	peerToken  atomic.Pointer[string]
	band       Band
	log        *slog.Logger
	client     *http.Client
	rand       io.Reader
	version    string
	echo       *echo.Echo
	metrics    *metrics
	registry   *prometheus.Registry
	httpServer *http.Server
	guard      *guard
	audit      *Auditor
	lagging    func() bool             // Deps.Lagging; nil: node.Lagging
	parking    atomic.Pointer[parking] // set by Serve; nil: blocking queries wait in their handler
	eventPing  time.Duration           // Deps.EventPing
	eventWrite time.Duration           // Deps.EventWriteTimeout
	streams    atomic.Int64            // open event streams
	closing    chan struct{}           // closed by Shutdown: event streams end
	closeOnce  sync.Once
}

// New builds the server and its routes.
func New(d Deps) *Server {
	if d.Band == (Band{}) {
		d.Band = Band{Start: 31450, End: 31499}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Rand == nil {
		d.Rand = rand.Reader
	}
	d.Limits = withDefaults(d.Limits)
	if d.EventPing <= 0 {
		d.EventPing = defaultEventPing
	}
	if d.EventWriteTimeout <= 0 {
		d.EventWriteTimeout = defaultEventWriteTimeout
	}
	if d.Client == nil {
		dialer := &net.Dialer{Timeout: 500 * time.Millisecond, KeepAlive: 30 * time.Second}
		transport := &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			MaxIdleConns:        128,
			MaxIdleConnsPerHost: 64,
			MaxConnsPerHost:     d.Limits.ForwardConnections,
			IdleConnTimeout:     90 * time.Second,
		}
		if d.TLS != nil {
			transport.DialTLSContext = d.TLS.DialTLSContext(dialer)
		}
		d.Client = &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s := &Server{
		node:      d.Node,
		band:      d.Band,
		log:       d.Logger,
		client:    d.Client,
		rand:      d.Rand,
		version:   d.Version,
		registry:  d.Registry,
		lagging:   d.Lagging,
		eventPing: d.EventPing, eventWrite: d.EventWriteTimeout,
		closing: make(chan struct{}),
	}
	s.SetTokens(d.Tokens)
	s.metrics = newMetrics(d.Registry, d.Node)
	d.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "elanous_event_streams", Help: "Event streams (GET /v1/events) open on this node.",
	}, func() float64 { return float64(s.streams.Load()) }))
	s.guard = newGuard(d.Limits, d.Node, d.Registry)
	s.audit = &Auditor{log: d.Audit, address: s.guard.clientAddress}
	if s.audit.log == nil {
		s.audit.log = d.Logger
	}
	if d.Node != nil {
		d.Node.SetFormatProbe(s.probeFormat)
		d.Node.SetHealthProbe(s.probeHealth)
		d.Node.SetConfirmProbe(s.probeConfirm)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.metrics.middleware)
	s.echo = e
	s.routes(d.MetricsAuth)
	s.httpServer = &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(d.Logger.Handler(), slog.LevelWarn),
	}
	if d.TLS != nil {
		auth := tls.NoClientCert
		if d.VerifyClients {
			auth = tls.RequireAndVerifyClientCert
		}
		s.httpServer.TLSConfig = d.TLS.ServerConfig(auth)
	}
	return s
}

// SetTokens replaces the cluster tokens (admin, member, query) the server
// accepts; requests authenticated after it returns use the new set. Serve
// calls it when tokens.json is reloaded.
func (s *Server) SetTokens(t wire.TokensFile) {
	hashed := hashTokens(t)
	s.clusterTokens.Store(&hashed)
	peer := t.Query
	if peer == "" {
		peer = t.Member
	}
	if peer == "" {
		peer = t.Admin
	}
	s.peerToken.Store(&peer)
}

// Handler returns the API as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve serves the API on ln with the server timeouts of the HTTP contract (ReadHeader 5 s, Read 10 s, Write 30 s, Idle 120 s) until
// Shutdown — over TLS when Deps.TLS was set — capping its connections
// (Limits.Connections overall, Limits.ConnectionsPerAddress per remote address,
// counted before the TLS handshake). It returns nil after a clean shutdown.
func (s *Server) Serve(ln net.Listener) error {
	ln = s.guard.listen(ln)
	if s.httpServer.TLSConfig != nil {
		ln = tls.NewListener(ln, s.httpServer.TLSConfig)
	}
	rl := newReacceptListener(ln)
	defer rl.Close() // a parked query answered after Serve returns closes its connection
	s.parking.Store(newParking(s, rl))
	if err := s.httpServer.Serve(rl); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting requests and waits for those in flight (bounded by ctx).
// Parked blocking queries are answered first, with Connection: close, and
// event streams end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	if p := s.parking.Load(); p != nil {
		p.close()
	}
	return s.httpServer.Shutdown(ctx)
}
