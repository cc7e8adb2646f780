package member

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// ResolveTimeout bounds each candidate's GET /v1/primary during a resolution
// (primary.ts: AbortSignal.timeout(5_000)).
const ResolveTimeout = 5 * time.Second

// maxPrimaryBody bounds what is read of a /v1/primary answer.
const maxPrimaryBody = 64 << 10

// Candidate is a candidate machine a member may reach.
type Candidate struct {
	// Machine is the candidate's name exactly as the cluster knows it
	// (^[a-z0-9][a-z0-9-]{0,31}$); /v1/primary names the holder by it. An
	// empty name is allowed (for an address given without one): such a
	// candidate is recognized as the holder when the answer's url is its
	// origin.
	Machine string
	// URL is the candidate's API origin.
	URL string
	// Tokens are credentials configured for this address only.
	Tokens Tokens
}

// Address is a resolved API address and the token that may be sent there.
type Address struct {
	// URL is the origin to send requests to.
	URL string
	// Token is the bearer token for the resolver's role at URL; empty when
	// none was configured or joined for that address.
	Token string
	// Source says how URL was found: "lease" (candidate resolution),
	// "config", "join" or "local".
	Source string
	// Candidate is the configured name of the selected candidate, if any.
	Candidate string
	// Holder and Generation are the winning claim; zero when no candidate
	// knew the primary and the first candidate was taken as the fallback.
	Holder     string
	Generation uint64
	// Machine is the member machine named by the join file, set when Token is
	// that file's machine token.
	Machine string
}

// ResolverConfig configures a Resolver. Its fields mirror primary.ts's
// ResolvePrimaryOptions: Candidates is config.primaryCandidates, URL and
// Tokens are config.url and config.tokens, Join is the join file.
type ResolverConfig struct {
	// Candidates are asked for the primary; empty means static resolution
	// (URL, else the join file's URL, else LocalURL).
	Candidates []Candidate
	// URL is a configured address; Tokens are used for it only (and, in
	// static resolution, for whatever address is selected, as primary.ts does).
	URL    string
	Tokens Tokens
	// Join is the member's join file, or nil. Its tokens go only to its URL.
	Join *Join
	// LocalURL and LocalTokens are the local candidate's address and its
	// tokens.json; LocalTokens are used only for LocalURL, and only when the
	// join file names another address. Both are optional.
	LocalURL    string
	LocalTokens Tokens
	// Role is the scope the caller needs; the default is ScopeMember.
	Role Scope
	// HTTPClient sends the /v1/primary queries (no token is ever attached);
	// nil means a new http.Client.
	HTTPClient *http.Client
	// Timeout bounds each candidate's answer; 0 means ResolveTimeout.
	Timeout time.Duration
	// Logger receives a debug record per resolution; nil discards.
	Logger *slog.Logger
}

// Resolver finds the primary among the candidates and the token that may be
// sent to it. It is safe for concurrent use. Its only state is the candidate
// list (and the join file's), which a refresh from the cluster may replace
// (see Learn).
type Resolver struct {
	cur          atomic.Pointer[resolverView]
	learnMu      sync.Mutex // serializes Learn
	configURL    string
	configTokens Tokens
	localURL     string
	localTokens  Tokens
	role         Scope
	httpc        *http.Client
	timeout      time.Duration
	log          *slog.Logger
}

// resolverView is the replaceable part of a Resolver: the candidates and the
// join file as of now. A view is never changed; Learn stores a new one and
// closes the old one's replaced.
type resolverView struct {
	candidates []Candidate
	join       *Join // nil without a join file
	replaced   chan struct{}
}

// view returns the resolver's current candidates and join file.
func (r *Resolver) view() *resolverView { return r.cur.Load() }

// NewResolver validates cfg as resolveLeasePrimary does — candidate names
// (ErrInvalidCandidate), no duplicate name (ErrDuplicateCandidate), every
// address an http(s) origin (ErrInvalidURL), candidate tokens well formed
// (ErrInvalidTokens) — and returns a Resolver.
func NewResolver(cfg ResolverConfig) (*Resolver, error) {
	r := &Resolver{
		configTokens: cfg.Tokens.clone(),
		localTokens:  cfg.LocalTokens.clone(),
		role:         cfg.Role,
		httpc:        cfg.HTTPClient,
		timeout:      cfg.Timeout,
		log:          cfg.Logger,
	}
	if r.role == "" {
		r.role = ScopeMember
	}
	switch r.role {
	case ScopeAdmin, ScopeMember, ScopeQuery:
	default:
		return nil, fmt.Errorf("resolver: unknown role %q", string(r.role))
	}
	if r.httpc == nil {
		r.httpc = &http.Client{}
	}
	if r.timeout <= 0 {
		r.timeout = ResolveTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	v := &resolverView{replaced: make(chan struct{})}
	seen := make(map[string]bool, len(cfg.Candidates))
	for _, c := range cfg.Candidates {
		// A configured candidate may be an address alone: holderIndex then
		// matches it by the answer's url.
		origin, err := checkCandidate(seen, c.Machine, c.URL, true)
		if err != nil {
			return nil, err
		}
		if err := c.Tokens.validate(); err != nil {
			return nil, fmt.Errorf("candidate %q: %w", c.Machine, err)
		}
		v.candidates = append(v.candidates, Candidate{Machine: c.Machine, URL: origin, Tokens: c.Tokens.clone()})
	}
	var err error
	if cfg.URL != "" {
		if r.configURL, err = wire.ParseOrigin(cfg.URL); err != nil {
			return nil, fmt.Errorf("configured url: %w", err)
		}
	}
	if cfg.LocalURL != "" {
		if r.localURL, err = wire.ParseOrigin(cfg.LocalURL); err != nil {
			return nil, fmt.Errorf("local url: %w", err)
		}
	}
	if cfg.Join != nil {
		origin, err := wire.ParseOrigin(cfg.Join.URL)
		if err != nil {
			return nil, fmt.Errorf("join file url: %w", err)
		}
		v.join = &Join{URL: origin, Machine: cfg.Join.Machine, Tokens: cfg.Join.Tokens.clone(), CA: cfg.Join.CA, Candidates: cloneCandidates(cfg.Join.Candidates)}
	}
	if len(v.candidates) == 0 && r.configURL == "" && v.join == nil && r.localURL == "" {
		return nil, ErrNoCandidates
	}
	r.cur.Store(v)
	return r, nil
}

// Candidates returns the validated candidates, URLs normalized.
// The list is the configured one until a refresh from the cluster replaces
// it (Learn).
func (r *Resolver) Candidates() []Candidate { return cloneCandidates(r.view().candidates) }

// cloneCandidates deep-copies a candidate list.
func cloneCandidates(list []Candidate) []Candidate {
	if list == nil {
		return nil
	}
	out := make([]Candidate, len(list))
	for i, c := range list {
		out[i] = Candidate{Machine: c.Machine, URL: c.URL, Tokens: c.Tokens.clone()}
	}
	return out
}

// Role returns the scope the resolver picks tokens for.
func (r *Resolver) Role() Scope { return r.role }

// Resolve finds the primary. With candidates it is primary.ts
// resolveLeasePrimary: every candidate's GET /v1/primary is asked
// concurrently, without a token, each within the timeout; an answer counts
// only when it is 2xx, a JSON object, known is true, holder names a
// configured candidate and generation is a positive integer; the highest
// generation wins (on a tie, the earlier candidate's answer), and the first
// candidate is the fallback. Without candidates it is resolveStaticPrimary.
// An unreachable candidate is not an error; Resolve fails only on a token of
// the wrong form (ErrInvalidToken) or no address at all.
func (r *Resolver) Resolve(ctx context.Context) (Address, error) {
	v := r.view()
	if len(v.candidates) == 0 {
		return r.resolveStatic(v)
	}
	replies := make([]primaryReply, len(v.candidates))
	var wg sync.WaitGroup
	for i, c := range v.candidates {
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, r.timeout)
			defer cancel()
			replies[i], _, _ = r.queryPrimary(qctx, c.URL, 0, 0)
		})
	}
	wg.Wait()
	winner, generation, holderName := -1, uint64(0), ""
	for _, reply := range replies {
		if !reply.valid {
			continue
		}
		holder := holderIndex(v.candidates, reply)
		if holder >= 0 && (winner < 0 || reply.generation > generation) {
			winner, generation, holderName = holder, reply.generation, reply.holder
		}
	}
	selected := 0
	if winner >= 0 {
		selected = winner
	}
	sel := v.candidates[selected]
	addr, err := r.addressAt(v, sel.URL, sel.Tokens, false)
	if err != nil {
		return Address{}, err
	}
	addr.Source, addr.Candidate = "lease", sel.Machine
	if winner >= 0 {
		addr.Holder, addr.Generation = holderName, generation
	}
	r.log.Debug("primary resolved", "source", "lease", "url", addr.URL,
		"holder", addr.Holder, "generation", addr.Generation)
	return addr, nil
}

// Route resolves the primary like Resolve and, when no token for the role
// may be sent to it, returns instead the first address that has one: the
// candidates in order, then the join file's and the configured address. Any
// candidate forwards writes to the leader, so a member that joined through
// one candidate keeps working when another leads — and its token still goes
// only where it was joined. The TypeScript client has no such fallback.
func (r *Resolver) Route(ctx context.Context) (Address, error) {
	addr, err := r.Resolve(ctx)
	if err != nil || addr.Token != "" {
		return addr, err
	}
	v := r.view()
	for _, c := range v.candidates {
		alt, err := r.addressAt(v, c.URL, c.Tokens, false)
		if err == nil && alt.Token != "" {
			alt.Source, alt.Candidate = "lease", c.Machine
			alt.Holder, alt.Generation = addr.Holder, addr.Generation
			return alt, nil
		}
	}
	fallbacks := []string{v.joinURL()}
	if v.join != nil {
		for _, c := range v.join.Candidates {
			fallbacks = append(fallbacks, c.URL)
		}
	}
	for _, u := range append(fallbacks, r.configURL) {
		if u == "" || len(v.candidates) == 0 {
			continue
		}
		alt, err := r.addressAt(v, u, nil, false)
		if err == nil && alt.Token != "" {
			alt.Source, alt.Holder, alt.Generation = "lease", addr.Holder, addr.Generation
			return alt, nil
		}
	}
	return addr, nil
}

// AddressFor applies the token rules to any address (normally a candidate's):
// the candidate's own token, else the configured one if url is the
// configured address, else the join file's if url is the join address, else
// the local one. It lets a caller talk to one particular candidate, as
// `status` does.
func (r *Resolver) AddressFor(rawURL string) (Address, error) {
	origin, err := wire.ParseOrigin(rawURL)
	if err != nil {
		return Address{}, err
	}
	v := r.view()
	for _, c := range v.candidates {
		if c.URL == origin {
			addr, err := r.addressAt(v, origin, c.Tokens, false)
			addr.Source, addr.Candidate = "lease", c.Machine
			return addr, err
		}
	}
	return r.addressAt(v, origin, nil, len(v.candidates) == 0)
}

func (v *resolverView) joinURL() string {
	if v.join == nil {
		return ""
	}
	return v.join.URL
}

// joinTrusts reports whether the join file's tokens may go to target: its
// URL, or a candidate the cluster listed to the member when it asked with
// the join file's credentials (Join.Candidates).
func (v *resolverView) joinTrusts(target string) bool {
	if v.join == nil {
		return false
	}
	if v.join.URL == target {
		return true
	}
	for _, c := range v.join.Candidates {
		if c.URL == target {
			return true
		}
	}
	return false
}

// resolveStatic is primary.ts resolveStaticPrimary: the configured URL, else
// the join file's, else the local one.
func (r *Resolver) resolveStatic(v *resolverView) (Address, error) {
	target, source := r.configURL, "config"
	if target == "" && v.join != nil {
		target, source = v.join.URL, "join"
	}
	if target == "" {
		target, source = r.localURL, "local"
	}
	if target == "" {
		return Address{}, ErrNoCandidates
	}
	addr, err := r.addressAt(v, target, nil, true)
	if err != nil {
		return Address{}, err
	}
	addr.Source = source
	r.log.Debug("primary resolved", "source", source, "url", addr.URL)
	return addr, nil
}

// addressAt picks the token for target with primary.ts's precedence:
//  1. the address's own configured token (a candidate's tokens);
//  2. the configured tokens — in lease resolution only when target is the
//     configured address, in static resolution always (as primary.ts does);
//  3. the join file's token for the role, only when target is the join
//     file's address or a candidate the cluster listed to it (joinTrusts;
//     query falls back to the joined member token);
//  4. the local tokens.json, only for the local address and only when the
//     join file does not name that address.
func (r *Resolver) addressAt(v *resolverView, target string, own Tokens, static bool) (Address, error) {
	role := r.role
	configured, has := own[role]
	if !has && (static || (r.configURL != "" && r.configURL == target)) {
		configured, has = r.configTokens[role]
	}
	if has && !wire.ValidToken(configured) {
		return Address{}, fmt.Errorf("%w for %s", ErrInvalidToken, target)
	}
	joined, hasJoined := "", false
	if v.joinTrusts(target) {
		joined, hasJoined = v.join.Tokens[role]
		if !hasJoined && role == ScopeQuery {
			joined, hasJoined = v.join.Tokens[ScopeMember]
		}
	}
	addr := Address{URL: target}
	switch {
	case has:
		addr.Token = configured
	case hasJoined:
		addr.Token = joined
	case r.localURL != "" && target == r.localURL && !v.joinTrusts(target):
		addr.Token = r.localTokens[role]
	}
	if hasJoined && addr.Token != "" && addr.Token == joined && v.join.Machine != "" {
		addr.Machine = v.join.Machine
	}
	return addr, nil
}

// holderIndex returns the candidate an answer names as holder, or -1: the
// candidate with that machine name or, for an unnamed candidate, the one
// whose origin is the answer's url.
func holderIndex(candidates []Candidate, reply primaryReply) int {
	for i, c := range candidates {
		if c.Machine != "" && c.Machine == reply.holder {
			return i
		}
	}
	origin, err := wire.ParseOrigin(reply.url)
	if err != nil {
		return -1
	}
	for i, c := range candidates {
		if c.Machine == "" && c.URL == origin {
			return i
		}
	}
	return -1
}

// primaryReply is one candidate's /v1/primary answer, judged by
// resolveLeasePrimary's rules (valid) before the holder is looked up.
type primaryReply struct {
	valid      bool
	holder     string
	url        string
	generation uint64
}

// queryPrimary asks base for GET /v1/primary, without a token. With index > 0
// it is a blocking query (?index=N&wait=D). It returns the judged answer and
// the X-Elanous-Index header (0 when absent). An answer that is not 2xx is a
// non-valid reply, not an error; err is set only when nothing was received.
func (r *Resolver) queryPrimary(ctx context.Context, base string, index uint64, wait time.Duration) (primaryReply, uint64, error) {
	target := base + "/v1/primary"
	if index > 0 {
		target += "?" + blockingQuery(index, wait).Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return primaryReply{}, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.httpc.Do(req)
	if err != nil {
		return primaryReply{}, 0, fmt.Errorf("get %s: %w: %w", target, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPrimaryBody))
	if err != nil {
		return primaryReply{}, 0, fmt.Errorf("read %s: %w: %w", target, ErrUnreachable, err)
	}
	next := headerIndex(resp.Header)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return primaryReply{}, next, nil
	}
	return parsePrimaryReply(body), next, nil
}

// parsePrimaryReply judges a /v1/primary body: a JSON object whose known is
// true, holder a string and generation a safe integer of at least 1.
func parsePrimaryReply(body []byte) primaryReply {
	var row map[string]json.RawMessage
	if err := json.Unmarshal(body, &row); err != nil || row == nil {
		return primaryReply{}
	}
	if string(bytes.TrimSpace(row["known"])) != "true" {
		return primaryReply{}
	}
	holder, ok := jsonString(row["holder"])
	if !ok {
		return primaryReply{}
	}
	generation, ok := positiveSafeInteger(row["generation"])
	if !ok {
		return primaryReply{}
	}
	addr, _ := jsonString(row["url"])
	return primaryReply{valid: true, holder: holder, url: addr, generation: generation}
}

// positiveSafeInteger mirrors Number.isSafeInteger(v) && v >= 1 for a JSON
// value: a number (2.0 counts as 2) between 1 and 2^53-1.
func positiveSafeInteger(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, false
	}
	if f < 1 || f > 1<<53-1 || f != math.Trunc(f) {
		return 0, false
	}
	return uint64(f), true
}

// primaryFromReply turns a winning answer into the wire type, with the URL of
// the configured candidate rather than the one the server reported.
func primaryFromReply(c Candidate, reply primaryReply) wire.Primary {
	return wire.Primary{Known: true, Holder: reply.holder, Generation: reply.generation, URL: c.URL}
}

// needsToken reports whether any token is configured at all; a resolver
// without tokens (a watcher, a status probe) accepts tokenless addresses.
func (r *Resolver) needsToken() bool {
	v := r.view()
	if len(r.configTokens) > 0 || len(r.localTokens) > 0 || (v.join != nil && len(v.join.Tokens) > 0) {
		return true
	}
	for _, c := range v.candidates {
		if len(c.Tokens) > 0 {
			return true
		}
	}
	return false
}
