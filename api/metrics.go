package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the API's Prometheus figures plus the node's, which the API
// only registers: its raft view (term, indexes, leadership), the replicated
// state's counts, its proposal histogram and lateness figures, all of one
// collector (cluster.Node.Collector), and raft's own metrics
// (cluster.RaftMetrics). No figure uses a sentinel value: one that
// does not apply is absent.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	forwards *prometheus.CounterVec
	access   *slog.Logger // nil: no access log; set by Server.LogRequests before serving
	// unapplied counts forwarded writes answered before this node applied
	// them (the read-your-writes wait ran out of the route's budget).
	unapplied prometheus.Counter
	// routes are the paths of the route table: the only route labels, with
	// "other" (set by Server.routes before serving).
	routes map[string]bool
}

func newMetrics(reg *prometheus.Registry, node *cluster.Node) *metrics {
	m := &metrics{
		routes: map[string]bool{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elanous_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "elanous_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elanous_forwards_total", Help: "Requests forwarded from this follower to the leader, by result.",
		}, []string{"result"}),
		unapplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elanous_forward_unapplied_total",
			Help: "Forwarded writes answered before this node had applied them: the read-your-writes wait ran out of the route's time budget.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.forwards, m.unapplied,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if node == nil {
		return m
	}
	reg.MustRegister(node.Collector(), cluster.RaftMetrics())
	return m
}

// middleware records every request's route, status and latency, and writes
// an access log line when access logging is on.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		c.Set(requestStartKey, start)
		err := next(c)
		if _, ok := c.Get(parkedKey).(*parkedQuery); ok {
			return err // counted when it is answered or dropped (park.go)
		}
		done := requestOf(c, start)
		done.status, done.bytes = c.Response().Status, c.Response().Size
		if err != nil {
			done.status, _ = toWire(err)
		}
		m.observe(done)
		return err
	}
}

// requestDone is what the metrics and the access log record of a request.
type requestDone struct {
	route, method, path, remote string
	start                       time.Time
	status                      int
	bytes                       int64
}

// requestOf is the record of c's request, status and size still unset.
func requestOf(c echo.Context, start time.Time) requestDone {
	r := c.Request()
	return requestDone{route: c.Path(), method: r.Method, path: r.URL.Path, remote: r.RemoteAddr, start: start}
}

// requestStartKey holds when the metrics middleware saw the request.
const requestStartKey = "elanous.start"

// observe counts a finished request and writes its access log line.
func (m *metrics) observe(d requestDone) {
	route, method := d.route, methodLabel(d.method)
	if !m.routes[route] {
		route = "other"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(d.status)).Inc()
	elapsed := time.Since(d.start)
	m.duration.WithLabelValues(route, method).Observe(elapsed.Seconds())
	if m.access != nil {
		m.access.LogAttrs(context.Background(), slog.LevelInfo, "http request",
			slog.String("method", d.method), slog.String("path", d.path), slog.String("route", route),
			slog.Int("status", d.status), slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			slog.Int64("bytes", d.bytes), slog.String("remote", d.remote))
	}
}

// methodLabel is the method label of a request: one of the fixed set
// below, or "other", so random methods cannot grow the registry.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}
