package member

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewResolver_Validation(t *testing.T) {
	ok := Candidate{Machine: "node-a", URL: "http://10.0.0.1:31413"}
	tests := []struct {
		name  string
		cands []Candidate
		want  error
	}{
		{"uppercase name", []Candidate{{Machine: "Node-A", URL: ok.URL}}, ErrInvalidCandidate},
		{"leading hyphen", []Candidate{{Machine: "-a", URL: ok.URL}}, ErrInvalidCandidate},
		{"33 characters", []Candidate{{Machine: strings.Repeat("a", 33), URL: ok.URL}}, ErrInvalidCandidate},
		{"dot", []Candidate{{Machine: "a.b", URL: ok.URL}}, ErrInvalidCandidate},
		{"duplicate", []Candidate{ok, {Machine: "node-a", URL: "http://10.0.0.2:31413"}}, ErrDuplicateCandidate},
		{"path in url", []Candidate{{Machine: "a", URL: "http://h/x"}}, ErrInvalidURL},
		{"bad token", []Candidate{{Machine: "a", URL: ok.URL, Tokens: Tokens{ScopeMember: "short"}}}, ErrInvalidTokens},
		{"unknown scope", []Candidate{{Machine: "a", URL: ok.URL, Tokens: Tokens{"root": tokenA}}}, ErrInvalidTokens},
		{"nothing at all", nil, ErrNoCandidates},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewResolver(ResolverConfig{Candidates: tt.cands})
			if !errors.Is(err, tt.want) {
				t.Errorf("NewResolver() error = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := NewResolver(ResolverConfig{Candidates: []Candidate{ok, {Machine: "b", URL: ok.URL}}}); err != nil {
		t.Errorf("NewResolver(two names, one url) error = %v, want nil", err)
	}
}

// TestResolver_Resolve mirrors resolveLeasePrimary's rules: an answer counts
// only if ok, a JSON object, known === true, holder a string naming a
// candidate, generation a safe integer >= 1; the highest generation wins;
// the first candidate is the fallback.
func TestResolver_Resolve(t *testing.T) {
	const a, b, c = "a.test", "b.test", "c.test"
	tests := []struct {
		name    string
		answers map[string]outcome // host → /v1/primary answer (default: known false)
		want    string             // selected host
		wantGen uint64
	}{
		{"nobody knows: first candidate", map[string]outcome{}, a, 0},
		{"b claims generation 3", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":3}`)}, b, 3},
		{"a follower names the holder", map[string]outcome{a: body(`{"known":true,"holder":"c","generation":2}`)}, c, 2},
		{"highest generation wins", map[string]outcome{
			a: body(`{"known":true,"holder":"a","generation":4}`),
			b: body(`{"known":true,"holder":"b","generation":5}`),
			c: body(`{"known":true,"holder":"a","generation":4}`)}, b, 5},
		{"a tie goes to the earlier answer", map[string]outcome{
			a: body(`{"known":true,"holder":"b","generation":5}`),
			b: body(`{"known":true,"holder":"c","generation":5}`)}, b, 5},
		{"generation 2.0 counts", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":2.0}`)}, b, 2},
		{"known false ignored", map[string]outcome{b: body(`{"known":false,"holder":"b","generation":9}`)}, a, 0},
		{"known \"true\" ignored", map[string]outcome{b: body(`{"known":"true","holder":"b","generation":9}`)}, a, 0},
		{"unknown holder ignored", map[string]outcome{b: body(`{"known":true,"holder":"z","generation":9}`)}, a, 0},
		{"holder not a string", map[string]outcome{b: body(`{"known":true,"holder":1,"generation":9}`)}, a, 0},
		{"generation 0 ignored", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":0}`)}, a, 0},
		{"generation 1.5 ignored", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":1.5}`)}, a, 0},
		{"generation string ignored", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":"9"}`)}, a, 0},
		{"generation above 2^53-1 ignored", map[string]outcome{b: body(`{"known":true,"holder":"b","generation":9007199254740992}`)}, a, 0},
		{"array ignored", map[string]outcome{b: body(`[{"known":true,"holder":"b","generation":9}]`)}, a, 0},
		{"not JSON ignored", map[string]outcome{b: body(`<html>`)}, a, 0},
		{"503 ignored", map[string]outcome{b: {status: 503, body: `{"known":true,"holder":"b","generation":9}`}}, a, 0},
		{"refused and timeout ignored", map[string]outcome{a: refused, b: hang, c: body(`{"known":true,"holder":"c","generation":7}`)}, c, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newFakeNet()
				for host, o := range tt.answers {
					n.setDefault(host+" primary", o)
				}
				r, err := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{
					{Machine: "a", URL: "http://" + a, Tokens: Tokens{ScopeMember: tokenA}},
					{Machine: "b", URL: "http://" + b, Tokens: Tokens{ScopeMember: tokenA}},
					{Machine: "c", URL: "http://" + c, Tokens: Tokens{ScopeMember: tokenA}},
				}})
				if err != nil {
					t.Fatalf("NewResolver() error = %v", err)
				}
				addr, err := r.Resolve(t.Context())
				if err != nil {
					t.Fatalf("Resolve() error = %v", err)
				}
				if addr.URL != "http://"+tt.want || addr.Generation != tt.wantGen {
					t.Errorf("Resolve() = %s generation %d, want http://%s generation %d", addr.URL, addr.Generation, tt.want, tt.wantGen)
				}
				for _, h := range n.requests("primary") {
					if h.auth != "" {
						t.Errorf("GET /v1/primary to %s carried Authorization %q, want none", h.host, h.auth)
					}
				}
			})
		})
	}
}

func body(s string) outcome { return outcome{status: 200, body: s} }

// TestResolver_Concurrent: three candidates that never answer cost one
// timeout (5 s), not three (primary.ts asks them one after another).
func TestResolver_Concurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		for _, h := range []string{"a.test", "b.test", "c.test"} {
			n.setDefault(h+" primary", hang)
		}
		r, err := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{
			{Machine: "a", URL: "http://a.test"}, {Machine: "b", URL: "http://b.test"}, {Machine: "c", URL: "http://c.test"},
		}})
		if err != nil {
			t.Fatalf("NewResolver() error = %v", err)
		}
		start := time.Now()
		addr, err := r.Resolve(t.Context())
		if err != nil || addr.URL != "http://a.test" {
			t.Fatalf("Resolve() = %v, %v; want the first candidate", addr, err)
		}
		if took := time.Since(start); took != ResolveTimeout {
			t.Errorf("Resolve() took %v, want %v", took, ResolveTimeout)
		}
	})
}

// TestResolver_TokenPrecedence mirrors resolveLeasePrimary's
// `configured = selected.tokens?.[role] ?? (config.url === selected.url ?
// config.tokens?.[role] : undefined)`, then the join token only when
// `joinFile?.url === selected.url` (query falling back to member), then the
// local token only for the local URL.
func TestResolver_TokenPrecedence(t *testing.T) {
	const (
		urlA = "http://a.test"
		urlB = "http://b.test"
	)
	tokenC, tokenD := strings.Repeat("c3", 32), strings.Repeat("d4", 32)
	tests := []struct {
		name        string
		cfg         ResolverConfig
		want        string // token for urlA (the fallback: nobody knows a primary)
		wantMachine string
	}{
		{"candidate token first", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA, Tokens: Tokens{ScopeMember: tokenA}}},
			URL:        urlA, Tokens: Tokens{ScopeMember: tokenB},
			Join: &Join{URL: urlA, Tokens: Tokens{ScopeMember: tokenC}}}, tokenA, ""},
		{"config token for the same address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}}, URL: "http://A.test:80/", Tokens: Tokens{ScopeMember: tokenB},
			Join: &Join{URL: urlA, Tokens: Tokens{ScopeMember: tokenC}}}, tokenB, ""},
		{"config token not for another address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}}, URL: urlB, Tokens: Tokens{ScopeMember: tokenB}}, "", ""},
		{"join token for its address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}},
			Join:       &Join{URL: urlA, Machine: "mbp", Tokens: Tokens{ScopeMember: tokenC}}}, tokenC, "mbp"},
		{"join token not for another address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}},
			Join:       &Join{URL: urlB, Tokens: Tokens{ScopeMember: tokenC}}}, "", ""},
		{"query falls back to the joined member token", ResolverConfig{Role: ScopeQuery,
			Candidates: []Candidate{{Machine: "a", URL: urlA}},
			Join:       &Join{URL: urlA, Tokens: Tokens{ScopeMember: tokenC}}}, tokenC, ""},
		{"admin does not fall back to member", ResolverConfig{Role: ScopeAdmin,
			Candidates: []Candidate{{Machine: "a", URL: urlA}},
			Join:       &Join{URL: urlA, Tokens: Tokens{ScopeMember: tokenC}}}, "", ""},
		{"candidate query token has no member fallback", ResolverConfig{Role: ScopeQuery,
			Candidates: []Candidate{{Machine: "a", URL: urlA, Tokens: Tokens{ScopeMember: tokenA}}}}, "", ""},
		{"local token for the local address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}}, LocalURL: urlA, LocalTokens: Tokens{ScopeMember: tokenD}}, tokenD, ""},
		{"no local token when the join file names the local address", ResolverConfig{
			Candidates: []Candidate{{Machine: "a", URL: urlA}}, LocalURL: urlA, LocalTokens: Tokens{ScopeMember: tokenD},
			Join: &Join{URL: urlA, Tokens: Tokens{ScopeAdmin: tokenC}}}, "", ""},
		{"static: config token goes to the config address", ResolverConfig{
			URL: urlA, Tokens: Tokens{ScopeMember: tokenB}, Join: &Join{URL: urlB, Tokens: Tokens{ScopeMember: tokenC}}}, tokenB, ""},
		{"static: the join address and its token", ResolverConfig{
			Join: &Join{URL: urlA, Tokens: Tokens{ScopeMember: tokenC}}}, tokenC, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newFakeNet()
				tt.cfg.HTTPClient = n.client()
				r, err := NewResolver(tt.cfg)
				if err != nil {
					t.Fatalf("NewResolver() error = %v", err)
				}
				addr, err := r.Resolve(t.Context())
				if err != nil {
					t.Fatalf("Resolve() error = %v", err)
				}
				if addr.URL != urlA || addr.Token != tt.want || addr.Machine != tt.wantMachine {
					t.Errorf("Resolve() = %s token %.8q machine %q, want %s token %.8q machine %q",
						addr.URL, addr.Token, addr.Machine, urlA, tt.want, tt.wantMachine)
				}
			})
		})
	}
}

func TestResolver_InvalidConfiguredToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		r, err := NewResolver(ResolverConfig{HTTPClient: n.client(), Candidates: []Candidate{{Machine: "a", URL: "http://a.test"}},
			URL: "http://a.test", Tokens: Tokens{ScopeMember: "not-a-token"}})
		if err != nil {
			t.Fatalf("NewResolver() error = %v", err)
		}
		if _, err := r.Resolve(t.Context()); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Resolve() error = %v, want ErrInvalidToken", err)
		}
	})
}

// TestResolver_Route: the primary b has no token for this member (it joined
// through a), so requests go to a — which forwards — and the joined token is
// never sent to b.
func TestResolver_Route(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setPrimary("b.test", primaryOf("b.test", "b", 4))
		r, err := NewResolver(ResolverConfig{HTTPClient: n.client(),
			Candidates: []Candidate{{Machine: "a", URL: "http://a.test"}, {Machine: "b", URL: "http://b.test"}},
			Join:       &Join{URL: "http://a.test", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}}})
		if err != nil {
			t.Fatalf("NewResolver() error = %v", err)
		}
		addr, err := r.Resolve(t.Context())
		if err != nil || addr.URL != "http://b.test" || addr.Token != "" {
			t.Fatalf("Resolve() = %+v, %v; want b without a token", addr, err)
		}
		addr, err = r.Route(t.Context())
		if err != nil || addr.URL != "http://a.test" || addr.Token != tokenA || addr.Generation != 4 {
			t.Fatalf("Route() = %s %d, %v; want a with the joined token, generation 4", addr.URL, addr.Generation, err)
		}
	})
}

// TestResolver_UnnamedCandidates: addresses given without names match the
// holder by the answer's url.
func TestResolver_UnnamedCandidates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setPrimary("a.test", primaryOf("b.test", "node-b", 2))
		r, err := NewResolver(ResolverConfig{HTTPClient: n.client(),
			Candidates: []Candidate{{URL: "http://a.test"}, {URL: "http://b.test/"}}})
		if err != nil {
			t.Fatalf("NewResolver() error = %v", err)
		}
		addr, err := r.Resolve(t.Context())
		if err != nil || addr.URL != "http://b.test" || addr.Holder != "node-b" {
			t.Errorf("Resolve() = %+v, %v; want b (holder node-b)", addr, err)
		}
	})
}
