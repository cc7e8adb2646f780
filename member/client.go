package member

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Errors returned by this package. Server answers that are not 2xx are
// *APIError values instead; inspect them with errors.As or StatusCode.
var (
	// ErrUnreachable wraps every failure to get an answer from a server:
	// connection refused, DNS, TLS, a request timeout, a body cut short. The
	// heartbeat logs it as "network-or-timeout"; it is retryable.
	ErrUnreachable = errors.New("server unreachable")
	// ErrInvalidResponse wraps a 2xx answer whose body does not decode. The
	// member loops, which like the TypeScript client look only at the status,
	// count such an answer as a success.
	ErrInvalidResponse = errors.New("invalid response body")
	// ErrInvalidURL is returned by ParseOrigin (and everything that validates
	// an address) for anything but an http(s) origin.
	ErrInvalidURL = wire.ErrInvalidURL
	// ErrInvalidTokens is returned when a scoped token set has an unknown
	// scope or a malformed token (primary.ts "invalid primary tokens").
	ErrInvalidTokens = errors.New("invalid primary tokens")
	// ErrInvalidToken is returned by Resolve and NewClient when the token
	// selected for an address is not 64 lowercase hex characters.
	ErrInvalidToken = errors.New("invalid primary token")
	// ErrInvalidCandidate is returned by NewResolver for a candidate name
	// that does not match ^[a-z0-9][a-z0-9-]{0,31}$.
	ErrInvalidCandidate = errors.New("invalid primary candidate machine")
	// ErrDuplicateCandidate is returned by NewResolver when two candidates
	// share a name.
	ErrDuplicateCandidate = errors.New("duplicate primary candidate machine")
	// ErrNoCandidates is returned by NewResolver when there is no address to
	// resolve at all.
	ErrNoCandidates = errors.New("no candidate addresses")
	// ErrInvalidJoinFile wraps every way ReadJoinFile finds a join file damaged.
	ErrInvalidJoinFile = errors.New("invalid join file")
	// ErrInsecureFile is matched by *InsecureFileError: a join or token file
	// that group or others may access.
	ErrInsecureFile = errors.New("secret file is accessible by group or others")
	// ErrLeaseDeadline is passed to OnLeaseLost (and returned by
	// StartPortLease) when no renewal succeeded before last success + TTL -
	// margin.
	ErrLeaseDeadline = errors.New("port lease renewal deadline exceeded")
)

// APIError is a non-2xx answer from the API: its status and the
// {"error", "message"} body (Code is empty when the body was not that shape).
type APIError struct {
	Status  int
	Code    string
	Message string
}

// Error formats the status, code and message.
func (e *APIError) Error() string {
	msg := "http " + strconv.Itoa(e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusCode returns the HTTP status of the *APIError in err's chain, or 0.
func StatusCode(err error) int {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	return 0
}

// ErrorCode returns the error code of the *APIError in err's chain, or "".
func ErrorCode(err error) string {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return ""
}

// IsStatus reports whether err carries an *APIError with one of statuses.
func IsStatus(err error, statuses ...int) bool {
	status := StatusCode(err)
	for _, s := range statuses {
		if status != 0 && status == s {
			return true
		}
	}
	return false
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool { return IsStatus(err, http.StatusNotFound) }

// IsRetryable reports whether err is worth re-resolving the primary and
// retrying at once: the server was unreachable (ErrUnreachable, timeouts
// included) or answered 503 (no leader, not ready, outcome unknown).
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnreachable) || IsStatus(err, http.StatusServiceUnavailable)
}

// ClientConfig configures a Client. Either URL (and Token) fix the server,
// or Resolver picks it — the primary — and the token that may go there.
type ClientConfig struct {
	// URL is the API origin when Resolver is nil.
	URL string
	// Token is sent to URL; it must be a well-formed token when set.
	Token string
	// Resolver, when set, chooses the target with Route on first use and on
	// Reresolve.
	Resolver *Resolver
	// HTTPClient sends requests; nil means a new http.Client. Give it no
	// overall Timeout: blocking queries last up to their wait. Each call
	// takes its deadline from its context.
	HTTPClient *http.Client
}

// Client speaks the elanous-node HTTP API. Every method takes its deadline
// from ctx; a non-2xx answer is an *APIError, an unreachable server an error
// wrapping ErrUnreachable. It is safe for concurrent use.
type Client struct {
	httpc    *http.Client
	resolver *Resolver

	resolveMu sync.Mutex // serializes resolutions

	mu       sync.Mutex
	target   Address       // guarded by mu
	resolved bool          // guarded by mu
	changed  chan struct{} // guarded by mu; closed and replaced when FollowPrimary moves the target
}

// NewClient returns a Client for cfg. With a Resolver nothing is sent until
// the first request.
func NewClient(cfg ClientConfig) (*Client, error) {
	c := &Client{httpc: cfg.HTTPClient, resolver: cfg.Resolver, changed: make(chan struct{})}
	if c.httpc == nil {
		c.httpc = &http.Client{}
	}
	if c.resolver == nil {
		origin, err := wire.ParseOrigin(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("new client: %w", err)
		}
		if cfg.Token != "" && !wire.ValidToken(cfg.Token) {
			return nil, fmt.Errorf("new client: %w", ErrInvalidToken)
		}
		c.target, c.resolved = Address{URL: origin, Token: cfg.Token, Source: "config"}, true
	}
	return c, nil
}

// Resolver returns the client's resolver, or nil for a fixed address.
func (c *Client) Resolver() *Resolver { return c.resolver }

// Target returns where requests go, resolving the primary on first use.
func (c *Client) Target(ctx context.Context) (Address, error) {
	c.mu.Lock()
	target, ok := c.target, c.resolved
	c.mu.Unlock()
	if ok {
		return target, nil
	}
	c.resolveMu.Lock()
	defer c.resolveMu.Unlock()
	c.mu.Lock()
	target, ok = c.target, c.resolved
	c.mu.Unlock()
	if ok {
		return target, nil
	}
	return c.resolveLocked(ctx)
}

// Reresolve resolves the primary again (a no-op for a fixed address) and
// returns the new target. The member loops call it after a network error or
// a 503 before their one immediate retry.
func (c *Client) Reresolve(ctx context.Context) (Address, error) {
	if c.resolver == nil {
		return c.Target(ctx)
	}
	c.resolveMu.Lock()
	defer c.resolveMu.Unlock()
	return c.resolveLocked(ctx)
}

// resolveLocked runs the resolver; the caller holds resolveMu.
func (c *Client) resolveLocked(ctx context.Context) (Address, error) {
	addr, err := c.resolver.Route(ctx)
	if err != nil {
		return Address{}, fmt.Errorf("resolve primary: %w", err)
	}
	c.setTarget(addr)
	return addr, nil
}

// PrimaryChanged returns a channel that is closed the next time
// FollowPrimary moves the target to a newly claimed primary. The member
// loops wait on it during a failure backoff, so they retry the moment a new
// leader's claim is seen instead of when the backoff ends.
func (c *Client) PrimaryChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// setTarget replaces the target.
func (c *Client) setTarget(addr Address) {
	c.mu.Lock()
	c.target, c.resolved = addr, true
	c.mu.Unlock()
}

// request is one API call.
type request struct {
	method string
	path   string // already escaped
	query  url.Values
	header http.Header
	body   any  // JSON-encoded when non-nil
	noAuth bool // /v1/primary and friends are fetched without a token
	// errBody, when non-nil, also receives a non-2xx answer's JSON body
	// (an error body with fields beyond {error, message}).
	errBody any
}

// do sends req to the target and decodes a 2xx body into out (when non-nil
// and the status is not 204). It returns the answer's headers.
func (c *Client) do(ctx context.Context, req request, out any) (http.Header, error) {
	target, err := c.Target(ctx)
	if err != nil {
		return nil, err
	}
	return c.doAt(ctx, target, req, out)
}

// call is do for an answer decoded into a T.
func call[T any](ctx context.Context, c *Client, req request) (T, error) {
	var out T
	_, err := c.do(ctx, req, &out)
	return out, err
}

// blockingGet is a blocking GET of path (?index=N&wait=D), decoded into a
// T, with the answer's X-Elanous-Index: the index to pass next time.
func blockingGet[T any](ctx context.Context, c *Client, path string, index uint64, wait time.Duration) (T, uint64, error) {
	var out T
	h, err := c.do(ctx, request{method: http.MethodGet, path: path, query: blockingQuery(index, wait)}, &out)
	return out, headerIndex(h), err
}

// doAt is do with the target given.
func (c *Client) doAt(ctx context.Context, target Address, req request, out any) (http.Header, error) {
	endpoint := target.URL + req.path
	if len(req.query) > 0 {
		endpoint += "?" + req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		data, err := json.Marshal(req.body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", req.method, req.path, err)
		}
		body = bytes.NewReader(data)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, endpoint, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", req.method, req.path, err)
	}
	for k, vs := range req.header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	if req.body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	if !req.noAuth && target.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+target.Token)
	}
	resp, err := c.httpc.Do(hreq)
	if err != nil {
		// The *url.Error names the URL, never the Authorization header.
		return nil, fmt.Errorf("%s %s: %w: %w", req.method, req.path, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, readAPIError(resp, req.errBody)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, wire.MaxBodyBytes))
		return resp.Header, nil
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, fmt.Errorf("read %s %s: %w: %w", req.method, req.path, ErrUnreachable, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.Header, fmt.Errorf("decode %s %s: %w: %v", req.method, req.path, ErrInvalidResponse, err)
	}
	return resp.Header, nil
}

// readAPIError turns a non-2xx answer into an *APIError; a non-nil full
// also receives the JSON body, when it decodes.
func readAPIError(resp *http.Response, full any) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if full != nil {
		_ = json.Unmarshal(data, full)
	}
	apiErr := &APIError{Status: resp.StatusCode}
	var body wire.Error
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		apiErr.Code, apiErr.Message = body.Error, body.Message
	} else {
		apiErr.Message = strings.TrimSpace(string(data))
	}
	return apiErr
}

// EscapeID percent-encodes a resource id for a path segment exactly as
// JavaScript's encodeURIComponent does: everything but A-Z a-z 0-9 and
// -_.!~*'() is escaped, so "machine:mbp" becomes "machine%3Ambp" and
// "instance:host/1" becomes "instance%3Ahost%2F1".
func EscapeID(id string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		ch := id[i]
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9',
			strings.IndexByte("-_.!~*'()", ch) >= 0:
			b.WriteByte(ch)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[ch>>4])
			b.WriteByte(hexDigits[ch&15])
		}
	}
	return b.String()
}

// blockingQuery builds ?index=N&wait=D.
func blockingQuery(index uint64, wait time.Duration) url.Values {
	q := url.Values{"index": {strconv.FormatUint(index, 10)}}
	if wait > 0 {
		if wait%time.Second == 0 {
			q.Set("wait", strconv.FormatInt(int64(wait/time.Second), 10)+"s")
		} else {
			q.Set("wait", strconv.FormatInt(wait.Milliseconds(), 10)+"ms")
		}
	}
	return q
}

// headerIndex reads X-Elanous-Index, 0 when absent or malformed.
func headerIndex(h http.Header) uint64 {
	n, err := strconv.ParseUint(h.Get(wire.HeaderIndex), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Primary returns GET /v1/primary of the target, fetched without a token.
func (c *Client) Primary(ctx context.Context) (wire.Primary, error) {
	var p wire.Primary
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/primary", noAuth: true}, &p)
	return p, err
}

// PrimaryBlocking is a blocking GET /v1/primary?index=N&wait=D: it answers
// once the claim's index exceeds index, or at wait with the same index. It
// returns the answer and its X-Elanous-Index.
func (c *Client) PrimaryBlocking(ctx context.Context, index uint64, wait time.Duration) (wire.Primary, uint64, error) {
	var p wire.Primary
	h, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/primary", noAuth: true,
		query: blockingQuery(index, wait)}, &p)
	return p, headerIndex(h), err
}

// Health returns nil while the target serves (GET /v1/health).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/health", noAuth: true}, nil)
	return err
}

// Ready returns nil once the target knows a leader whose claim it applied
// (GET /v1/ready); a 503 *APIError otherwise.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/ready", noAuth: true}, nil)
	return err
}

// Metrics returns the Prometheus text of GET /metrics (with the token, for
// servers that require one).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var text string
	err := c.raw(ctx, "/metrics", &text)
	return text, err
}

// raw fetches a non-JSON body.
func (c *Client) raw(ctx context.Context, path string, out *string) error {
	target, err := c.Target(ctx)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, target.URL+path, nil)
	if err != nil {
		return fmt.Errorf("build GET %s: %w", path, err)
	}
	if target.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+target.Token)
	}
	resp, err := c.httpc.Do(hreq)
	if err != nil {
		return fmt.Errorf("GET %s: %w: %w", path, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readAPIError(resp, nil)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read GET %s: %w: %w", path, ErrUnreachable, err)
	}
	*out = string(data)
	return nil
}

// Register upserts a resource (POST /v1/resources/register).
func (c *Client) Register(ctx context.Context, r wire.RegisterRequest) (wire.Resource, error) {
	return call[wire.Resource](ctx, c, request{method: http.MethodPost, path: "/v1/resources/register", body: r})
}

// HeartbeatResource renews a resource's TTL and merges attrs into its own
// (POST /v1/resources/{id}/heartbeat). A 404 means the record is unknown or
// expired and must be registered again.
func (c *Client) HeartbeatResource(ctx context.Context, id string, attrs map[string]json.RawMessage) (wire.HeartbeatResponse, error) {
	return call[wire.HeartbeatResponse](ctx, c, request{method: http.MethodPost, path: "/v1/resources/" + EscapeID(id) + "/heartbeat",
		body: wire.HeartbeatRequest{Attrs: attrs}})
}

// DeleteResource removes a resource (DELETE /v1/resources/{id}).
func (c *Client) DeleteResource(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/resources/" + EscapeID(id)}, nil)
	return err
}

// ResourceFilter narrows GET /v1/resources; empty fields match everything.
type ResourceFilter struct {
	Kind    string
	Machine string
	// Consistent asks for a linearizable read (?consistent=true).
	Consistent bool
}

func (f ResourceFilter) query() url.Values {
	q := url.Values{}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if f.Machine != "" {
		q.Set("machine", f.Machine)
	}
	if f.Consistent {
		q.Set("consistent", "true")
	}
	return q
}

// ReadOptions tune a list read.
type ReadOptions struct {
	// Consistent asks for a linearizable read (?consistent=true): the leader
	// answers (a follower forwards), and the read sees every write
	// acknowledged before it. Without it the target answers from its own
	// state, which may be behind the leader's.
	Consistent bool
}

func (o ReadOptions) query() url.Values {
	q := url.Values{}
	if o.Consistent {
		q.Set("consistent", "true")
	}
	return q
}

// ListResources returns GET /v1/resources, narrowed by f.
func (c *Client) ListResources(ctx context.Context, f ResourceFilter) ([]wire.Resource, error) {
	return call[[]wire.Resource](ctx, c, request{method: http.MethodGet, path: "/v1/resources", query: f.query()})
}

// ListResourcesBlocking is a blocking GET /v1/resources?index=N&wait=D: it
// answers once the resource table changed after index (deletes and expiries
// included), or at wait. It returns the list and its X-Elanous-Index, the
// index to pass next time.
func (c *Client) ListResourcesBlocking(ctx context.Context, index uint64, wait time.Duration) ([]wire.Resource, uint64, error) {
	return blockingGet[[]wire.Resource](ctx, c, "/v1/resources", index, wait)
}

// GetResource returns GET /v1/resources/{id}.
func (c *Client) GetResource(ctx context.Context, id string) (wire.Resource, error) {
	return call[wire.Resource](ctx, c, request{method: http.MethodGet, path: "/v1/resources/" + EscapeID(id)})
}

// AcquirePortLease asks for the lowest free port of the test band
// (POST /v1/leases/port). A non-empty idempotencyKey makes a repeated call
// return the lease the first one created. A full band is a 409
// port-band-exhausted *APIError.
func (c *Client) AcquirePortLease(ctx context.Context, r wire.AcquireRequest, idempotencyKey string) (wire.PortLease, error) {
	var out wire.PortLease
	h := http.Header{}
	if idempotencyKey != "" {
		h.Set(wire.HeaderIdempotencyKey, idempotencyKey)
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/leases/port", header: h, body: r}, &out)
	return out, err
}

// RenewPortLease renews the lease on port (POST /v1/leases/port/{port}/heartbeat
// with x-port-lease-id, no body). 400, 403, 404 and 409 mean the lease is lost.
func (c *Client) RenewPortLease(ctx context.Context, port int, leaseID string) (wire.LeaseHeartbeatResponse, error) {
	return call[wire.LeaseHeartbeatResponse](ctx, c, request{method: http.MethodPost, path: "/v1/leases/port/" + strconv.Itoa(port) + "/heartbeat",
		header: http.Header{wire.HeaderPortLeaseID: {leaseID}}})
}

// ReleasePortLease releases the lease on port (DELETE /v1/leases/port/{port}
// with x-port-lease-id).
func (c *Client) ReleasePortLease(ctx context.Context, port int, leaseID string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/leases/port/" + strconv.Itoa(port),
		header: http.Header{wire.HeaderPortLeaseID: {leaseID}}}, nil)
	return err
}

// ListPortLeases returns GET /v1/leases/port.
func (c *Client) ListPortLeases(ctx context.Context, o ReadOptions) ([]wire.PortLease, error) {
	return call[[]wire.PortLease](ctx, c, request{method: http.MethodGet, path: "/v1/leases/port", query: o.query()})
}

// ListLeasesBlocking is a blocking GET /v1/leases/port?index=N&wait=D,
// returning the leases and their X-Elanous-Index.
func (c *Client) ListLeasesBlocking(ctx context.Context, index uint64, wait time.Duration) ([]wire.PortLease, uint64, error) {
	return blockingGet[[]wire.PortLease](ctx, c, "/v1/leases/port", index, wait)
}

// GetPortLease returns GET /v1/leases/port/{port}.
func (c *Client) GetPortLease(ctx context.Context, port int) (wire.PortLease, error) {
	return call[wire.PortLease](ctx, c, request{method: http.MethodGet, path: "/v1/leases/port/" + strconv.Itoa(port)})
}

// IssueMemberToken issues a machine token (POST /v1/tokens/member, admin).
// The token is in the answer this once; the cluster keeps only its hash.
func (c *Client) IssueMemberToken(ctx context.Context, machine string) (wire.IssuedToken, error) {
	return call[wire.IssuedToken](ctx, c, request{method: http.MethodPost, path: "/v1/tokens/member",
		body: wire.IssueTokenRequest{Machine: machine}})
}

// RevokeMemberToken revokes a machine's token (DELETE /v1/tokens/member/{machine}, admin).
func (c *Client) RevokeMemberToken(ctx context.Context, machine string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/tokens/member/" + EscapeID(machine)}, nil)
	return err
}

// ListMemberTokens lists machine tokens without their secrets (GET /v1/tokens/member, admin).
func (c *Client) ListMemberTokens(ctx context.Context, o ReadOptions) ([]wire.TokenInfo, error) {
	return call[[]wire.TokenInfo](ctx, c, request{method: http.MethodGet, path: "/v1/tokens/member", query: o.query()})
}

// ClusterStatus returns the target's own view of Raft (GET /v1/cluster/status).
func (c *Client) ClusterStatus(ctx context.Context) (wire.ClusterStatus, error) {
	return call[wire.ClusterStatus](ctx, c, request{method: http.MethodGet, path: "/v1/cluster/status"})
}
