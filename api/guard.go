package api

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// guard holds a server's abuse defences: the write rate limits, the caps on
// connections and blocking queries, and the set of peer addresses that tells
// a follower's forward from a client's request.
type guard struct {
	limits    wire.NodeLimits // withDefaults applied
	tokens    *keyedLimiter   // per machine-token fingerprint; nil: off
	addresses *keyedLimiter   // per remote address; nil: off
	// unknownForwards paces forwards of tokens this node does not know.
	unknownForwards *rate.Limiter
	blocking        *slots
	peers           *peerSet

	limited     *prometheus.CounterVec // elanous_rate_limited_total{scope}
	connRefused prometheus.Counter
	blockRefuse prometheus.Counter
}

func newGuard(limits wire.NodeLimits, node *cluster.Node, reg prometheus.Registerer) *guard {
	g := &guard{
		limits:          limits,
		unknownForwards: rate.NewLimiter(unknownTokenForwardRate, unknownTokenForwardBurst),
		blocking:        &slots{max: limits.BlockingQueries, perKey: limits.BlockingQueriesPerAddress, held: map[string]int{}},
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
	if r := writeLimit(limits); r != rate.Inf {
		g.tokens = newKeyedLimiter(r, limits.WriteBurst)
		g.addresses = newKeyedLimiter(r, limits.WriteBurst)
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

// blockingSlot takes for a blocking query or an event stream one of the
// slots they share, on this node and for the request's address, and returns
// its release. With none left it counts the refusal and answers with
// refuse's 429 (message msg), closing the connection.
func (s *Server) blockingSlot(c echo.Context, msg string) (release func(), err error) {
	release, ok := s.guard.blocking.acquire(addressKey(c.Request().RemoteAddr))
	if !ok {
		s.guard.blockRefuse.Inc()
		c.Response().Header().Set("Connection", "close")
		return nil, refuse(c, time.Second, msg)
	}
	return release, nil
}

// refuse answers a request over a limit: 429 rate-limited with Retry-After
// (whole seconds, at least 1).
func refuse(c echo.Context, retry time.Duration, msg string) error {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
	return errRateLimited(msg)
}
