package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// This file keeps a member's candidate list in step with the cluster. The
// cluster replicates its candidate directory; a member asks for it
// (GET /v1/cluster/peers, query scope — a machine token may read it) and
// replaces its list with the answer, so a candidate machine can be replaced
// without a change on any member. The TypeScript client has no such refresh.
//
// Trust: the list is asked only of an address the resolver chose (a
// configured, joined or already learned candidate), with the token that may
// go there; with a CA the HTTP client verified the server first. The
// candidates of the answer are then trusted with that token too: the
// candidates' own token (one from the environment or a token file) is copied
// to them, and when the token was the join file's the learned list becomes
// the join file's "candidates", to which the join file's tokens may go.
// A list learned over https must be all https.

// ErrUntrustedList is returned by Learn for an answer it may not use: no
// token was sent, the address is not one the resolver trusts, the list is
// empty, or it would move the member from https to plain http.
var ErrUntrustedList = errors.New("candidate list not trusted")

// Learned is the outcome of Learn.
type Learned struct {
	// Candidates is the member's candidate list now (machine and URL).
	Candidates []Candidate
	// Changed reports that the set of candidates differs from the one before.
	Changed bool
	// Joined reports that the list was learned with the join file's
	// credentials, so it may be written to the join file.
	Joined bool
}

// Learn replaces the candidates with the servers of peers (the answer of
// GET /v1/cluster/peers sent to from, an address this resolver chose, with
// its token): every server of the Raft configuration with a URL, in the
// answer's order. A server without a URL, or a directory entry that is no
// server, is left out. Nothing changes when it fails (ErrUntrustedList, or a
// name or URL that does not pass NewResolver's checks).
func (r *Resolver) Learn(from Address, peers []wire.Peer) (Learned, error) {
	r.learnMu.Lock()
	defer r.learnMu.Unlock()
	v := r.view()
	if from.Token == "" {
		return Learned{}, fmt.Errorf("%w: it was asked without a token", ErrUntrustedList)
	}
	teacher := slices.IndexFunc(v.candidates, func(c Candidate) bool { return c.URL == from.URL })
	if teacher < 0 && !v.joinTrusts(from.URL) && from.URL != r.configURL && from.URL != r.localURL {
		return Learned{}, fmt.Errorf("%w: %s is not an address this member trusts", ErrUntrustedList, from.URL)
	}
	var entries []wire.JoinCandidate
	for _, p := range peers {
		if p.URL == "" || (p.Suffrage != wire.SuffrageVoter && p.Suffrage != wire.SuffrageNonvoter) {
			continue
		}
		entries = append(entries, wire.JoinCandidate{Machine: p.Machine, URL: p.URL})
	}
	list, err := checkJoinCandidates(entries)
	if err != nil {
		return Learned{}, fmt.Errorf("candidate list from %s: %w", from.URL, err)
	}
	if len(list) == 0 {
		return Learned{}, fmt.Errorf("%w: %s listed no server with a url", ErrUntrustedList, from.URL)
	}
	if u, err := url.Parse(from.URL); err == nil && u.Scheme == "https" {
		for _, c := range list {
			if u2, err := url.Parse(c.URL); err != nil || u2.Scheme != "https" {
				return Learned{}, fmt.Errorf("%w: %s (over https) listed %s at %s", ErrUntrustedList, from.URL, c.Machine, c.URL)
			}
		}
	}
	var own Tokens
	if teacher >= 0 {
		own = v.candidates[teacher].Tokens
	}
	next := &resolverView{join: v.join, replaced: v.replaced}
	for _, c := range list {
		next.candidates = append(next.candidates, Candidate{Machine: c.Machine, URL: c.URL, Tokens: own.clone()})
	}
	res := Learned{Candidates: cloneCandidates(list), Changed: !sameCandidates(v.candidates, list)}
	if v.join != nil && v.joinTrusts(from.URL) && v.joinToken(r.role) == from.Token {
		res.Joined = true
		j := *v.join
		j.Tokens, j.Candidates = v.join.Tokens.clone(), cloneCandidates(list)
		next.join = &j
	}
	if res.Changed {
		next.replaced = make(chan struct{})
	}
	r.cur.Store(next)
	if res.Changed {
		close(v.replaced) // watchers move to the new list
		r.log.Info("candidate list refreshed from the cluster", "from", from.URL, "candidates", candidateNames(list))
	}
	return res, nil
}

// joinToken returns the join file's token for role, as addressAt picks it.
func (v *resolverView) joinToken(role Scope) string {
	if v.join == nil {
		return ""
	}
	if tok, ok := v.join.Tokens[role]; ok {
		return tok
	}
	if role == ScopeQuery {
		return v.join.Tokens[ScopeMember]
	}
	return ""
}

// sameCandidates reports whether a and b hold the same machines at the same
// URLs, in any order.
func sameCandidates(a, b []Candidate) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(list []Candidate) []string {
		out := make([]string, 0, len(list))
		for _, c := range list {
			out = append(out, c.Machine+" "+c.URL)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

func candidateNames(list []Candidate) []string {
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.Machine)
	}
	return out
}

// CandidateRefresh configures FollowCandidates.
type CandidateRefresh struct {
	// JoinRoot, when set, is the member's root directory: a list learned with
	// the join file's credentials is written to its control/join.json
	// ("candidates"), so the member starts from it next time. A member
	// without a join file keeps the list in memory only.
	JoinRoot string
	// OnChange, when set, is called (never concurrently) with the new list
	// each time the set of candidates changes.
	OnChange func([]Candidate)
	// Logger receives a line per change and per failure streak; nil discards.
	Logger *slog.Logger
}

// FollowCandidates keeps the client's candidate list in step with the
// cluster's until ctx ends, and returns ctx's error (or an error at once for
// a client with a fixed address). It asks the current target — the primary,
// or the address the token may go to — for GET /v1/cluster/peers with
// blocking queries (?index=N&wait=30s), so a change is seen as soon as the
// target applies it, and hands each answer to Learn. A failure backs off
// (1 s doubling to 30 s) and moves to a new target as soon as the primary
// changes. With a join file it is rewritten when the learned list differs
// from the one it holds (atomically, mode 0600, its tokens unchanged).
func (c *Client) FollowCandidates(ctx context.Context, o CandidateRefresh) error {
	if c.resolver == nil {
		return errors.New("follow candidates: the client has a fixed address")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		index    uint64
		lastURL  string
		failures int
	)
	for ctx.Err() == nil {
		changed := c.PrimaryChanged()
		target, err := c.Target(ctx)
		if err == nil && target.Token == "" {
			err = fmt.Errorf("%w: no token may be sent to %s", ErrUntrustedList, target.URL)
		}
		if err == nil {
			if target.URL != lastURL {
				index, lastURL = 0, target.URL
			}
			err = c.refreshOnce(ctx, target, &index, o, log)
		}
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			break
		}
		failures++
		index = 0
		if failures == 1 || failures%10 == 0 {
			log.Warn("candidate list refresh failed", "target", target.URL, "failures", failures, "err", err)
		}
		if IsRetryable(err) {
			_, _ = c.Reresolve(ctx)
		}
		t := time.NewTimer(watchBackoff(failures))
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
		}
		t.Stop()
	}
	return ctx.Err()
}

// refreshOnce asks target for the servers (a blocking query past *index),
// learns them and writes the join file when it should. It waits a poll
// interval itself when the server did not block.
func (c *Client) refreshOnce(ctx context.Context, target Address, index *uint64, o CandidateRefresh, log *slog.Logger) error {
	timeout := ResolveTimeout
	if *index > 0 {
		timeout += WatchWait
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	started := time.Now()
	var peers []wire.Peer
	req := request{method: "GET", path: "/v1/cluster/peers"}
	if *index > 0 {
		req.query = blockingQuery(*index, WatchWait)
	}
	h, err := c.doAt(qctx, target, req, &peers)
	cancel()
	if err != nil {
		return err
	}
	learned, err := c.resolver.Learn(target, peers)
	if err != nil {
		return err
	}
	if learned.Changed && o.OnChange != nil {
		o.OnChange(learned.Candidates)
	}
	if o.JoinRoot != "" && learned.Joined {
		if wrote, err := persistCandidates(o.JoinRoot, learned.Candidates); err != nil {
			log.Warn("could not keep the candidate list in the join file", "err", err)
		} else if wrote {
			log.Info("kept the candidate list in the join file", "path", JoinPath(o.JoinRoot), "candidates", candidateNames(learned.Candidates))
		}
	}
	next := headerIndex(h)
	switch {
	case next == 0 || (next == *index && time.Since(started) < watchPollInterval):
		// No blocking support, or an answer at once with the same index.
		*index = next
		if !sleepCtx(ctx, watchPollInterval) {
			return ctx.Err()
		}
	case next < *index:
		*index = 0 // a rebuilt cluster: start over
	default:
		*index = next
	}
	return nil
}

// persistCandidates writes list as the join file's candidates unless it
// holds them already; it reports whether it wrote. A missing join file is
// left missing.
func persistCandidates(root string, list []Candidate) (bool, error) {
	j, err := ReadJoinFile(root)
	if err != nil || j == nil {
		return false, err
	}
	if sameCandidates(j.Candidates, list) {
		return false, nil
	}
	j.Candidates = make([]Candidate, 0, len(list))
	for _, c := range list {
		j.Candidates = append(j.Candidates, Candidate{Machine: c.Machine, URL: c.URL})
	}
	return true, WriteJoinFile(root, *j)
}
