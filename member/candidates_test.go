package member

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

const (
	learnToken = "1111111111111111111111111111111111111111111111111111111111111111"
	otherToken = "2222222222222222222222222222222222222222222222222222222222222222"
)

func peer(machine, url, suffrage string) wire.Peer {
	return wire.Peer{Machine: machine, URL: url, Raft: "10.0.0.1:31412", Suffrage: suffrage}
}

func TestResolver_Learn(t *testing.T) {
	a, b := "http://10.0.0.1:31413", "http://10.0.0.2:31413"
	d := "http://10.0.0.4:31413"
	good := []wire.Peer{peer("node-a", a, wire.SuffrageVoter), peer("node-b", b, wire.SuffrageVoter), peer("node-d", d, wire.SuffrageNonvoter)}
	tests := []struct {
		name  string
		from  Address
		peers []wire.Peer
		want  error
	}{
		{"no token", Address{URL: a}, good, ErrUntrustedList},
		{"untrusted address", Address{URL: "http://10.0.0.9:31413", Token: learnToken}, good, ErrUntrustedList},
		{"nothing with a url", Address{URL: a, Token: learnToken}, []wire.Peer{peer("node-a", "", wire.SuffrageVoter), peer("node-b", b, wire.SuffrageNone)}, ErrUntrustedList},
		{"bad name", Address{URL: a, Token: learnToken}, []wire.Peer{peer("Node_A", a, wire.SuffrageVoter)}, ErrInvalidCandidate},
		{"twice the same name", Address{URL: a, Token: learnToken}, []wire.Peer{peer("node-a", a, wire.SuffrageVoter), peer("node-a", b, wire.SuffrageVoter)}, ErrDuplicateCandidate},
		{"bad url", Address{URL: a, Token: learnToken}, []wire.Peer{peer("node-a", "ftp://x", wire.SuffrageVoter)}, ErrInvalidURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewResolver(ResolverConfig{Candidates: []Candidate{
				{Machine: "node-a", URL: a, Tokens: Tokens{ScopeMember: learnToken}},
				{Machine: "node-b", URL: b, Tokens: Tokens{ScopeMember: learnToken}}}})
			if err != nil {
				t.Fatal(err)
			}
			before := r.Candidates()
			if _, err := r.Learn(tt.from, tt.peers); !errors.Is(err, tt.want) {
				t.Fatalf("Learn() error = %v, want %v", err, tt.want)
			}
			if got := r.Candidates(); !slices.EqualFunc(got, before, func(x, y Candidate) bool { return x.Machine == y.Machine && x.URL == y.URL }) {
				t.Errorf("Candidates() after a refused Learn = %+v, want %+v", got, before)
			}
		})
	}

	t.Run("https teacher listing http", func(t *testing.T) {
		r, _ := NewResolver(ResolverConfig{Candidates: []Candidate{{Machine: "node-a", URL: "https://a.example", Tokens: Tokens{ScopeMember: learnToken}}}})
		_, err := r.Learn(Address{URL: "https://a.example", Token: learnToken},
			[]wire.Peer{peer("node-a", "https://a.example", wire.SuffrageVoter), peer("node-d", "http://d.example", wire.SuffrageVoter)})
		if !errors.Is(err, ErrUntrustedList) {
			t.Fatalf("Learn() error = %v, want ErrUntrustedList", err)
		}
	})

	t.Run("token from the environment", func(t *testing.T) {
		r, _ := NewResolver(ResolverConfig{Candidates: []Candidate{
			{Machine: "node-a", URL: a, Tokens: Tokens{ScopeMember: learnToken}},
			{Machine: "node-c", URL: "http://10.0.0.3:31413", Tokens: Tokens{ScopeMember: learnToken}}}})
		got, err := r.Learn(Address{URL: a, Token: learnToken}, append(good, peer("node-x", "", wire.SuffrageVoter)))
		if err != nil {
			t.Fatalf("Learn() error = %v", err)
		}
		if !got.Changed || got.Joined || len(got.Candidates) != 3 {
			t.Fatalf("Learn() = %+v, want three candidates, changed, not joined", got)
		}
		addr, err := r.AddressFor(d)
		if err != nil || addr.Token != learnToken || addr.Candidate != "node-d" {
			t.Errorf("AddressFor(learned node-d) = %+v, %v; want the candidates' token", addr, err)
		}
		if addr, _ := r.AddressFor("http://10.0.0.3:31413"); addr.Token != "" {
			t.Errorf("AddressFor(dropped node-c) token = %q, want none", addr.Token)
		}
		again, err := r.Learn(Address{URL: d, Token: learnToken}, good)
		if err != nil || again.Changed {
			t.Errorf("Learn() of the same list = %+v, %v; want unchanged", again, err)
		}
	})

	t.Run("token from the join file", func(t *testing.T) {
		join := &Join{URL: a, Machine: "mbp", Tokens: Tokens{ScopeMember: learnToken}}
		r, _ := NewResolver(ResolverConfig{Candidates: []Candidate{{Machine: "node-a", URL: a}, {Machine: "node-b", URL: b}}, Join: join})
		if addr, _ := r.AddressFor(d); addr.Token != "" {
			t.Fatalf("AddressFor(node-d) before learning = %+v, want no token", addr)
		}
		// Asked with another token than the join file's: not joined.
		other, err := r.Learn(Address{URL: a, Token: otherToken}, good)
		if err != nil || other.Joined {
			t.Fatalf("Learn(other token) = %+v, %v; want not joined", other, err)
		}
		if addr, _ := r.AddressFor(d); addr.Token != "" {
			t.Fatalf("AddressFor(node-d) after a list learned with another token = %+v, want no join token", addr)
		}
		got, err := r.Learn(Address{URL: a, Token: learnToken, Machine: "mbp"}, good)
		if err != nil || !got.Joined {
			t.Fatalf("Learn(join token) = %+v, %v; want joined", got, err)
		}
		addr, err := r.AddressFor(d)
		if err != nil || addr.Token != learnToken || addr.Machine != "mbp" {
			t.Errorf("AddressFor(learned node-d) = %+v, %v; want the join file's machine token", addr, err)
		}
	})
}

func TestJoinFile_Candidates(t *testing.T) {
	root := t.TempDir()
	j := Join{URL: "http://10.0.0.1:31413", Machine: "mbp", Tokens: Tokens{ScopeMember: learnToken},
		Candidates: []Candidate{{Machine: "node-a", URL: "HTTP://10.0.0.1:31413/"}, {Machine: "node-d", URL: "http://10.0.0.4:31413"}}}
	if err := WriteJoinFile(root, j); err != nil {
		t.Fatalf("WriteJoinFile() error = %v", err)
	}
	info, err := os.Stat(JoinPath(root))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("join file mode = %v, %v; want 0600", info, err)
	}
	raw, _ := os.ReadFile(JoinPath(root))
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"url", "machine", "token", "candidates"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("join file %s has no %q", raw, key)
		}
	}
	got, err := ReadJoinFile(root)
	want := []Candidate{{Machine: "node-a", URL: "http://10.0.0.1:31413"}, {Machine: "node-d", URL: "http://10.0.0.4:31413"}}
	if err != nil || !slices.EqualFunc(got.Candidates, want, func(x, y Candidate) bool { return x.Machine == y.Machine && x.URL == y.URL }) {
		t.Fatalf("ReadJoinFile() = %+v, %v; want the two candidates back, URLs normalized", got, err)
	}

	for name, content := range map[string]string{
		"not an array":   `{"url":"http://a:1","tokens":{"query":"` + learnToken + `"},"candidates":{"node-a":"http://a:1"}}`,
		"bad name":       `{"url":"http://a:1","tokens":{"query":"` + learnToken + `"},"candidates":[{"machine":"A_1","url":"http://a:1"}]}`,
		"bad url":        `{"url":"http://a:1","tokens":{"query":"` + learnToken + `"},"candidates":[{"machine":"node-a","url":"a:1"}]}`,
		"duplicate name": `{"url":"http://a:1","tokens":{"query":"` + learnToken + `"},"candidates":[{"machine":"node-a","url":"http://a:1"},{"machine":"node-a","url":"http://b:1"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeJoinRaw(t, root, content, 0o600)
			if _, err := ReadJoinFile(root); !errors.Is(err, ErrInvalidJoinFile) {
				t.Errorf("ReadJoinFile(%s) error = %v, want ErrInvalidJoinFile", content, err)
			}
		})
	}
}

// peersServer is a candidate that answers /v1/primary and
// /v1/cluster/peers, with blocking queries on the list.
type peersServer struct {
	*httptest.Server
	mu      sync.Mutex
	primary wire.Primary
	peers   []wire.Peer
	index   uint64
	changed chan struct{}
	auths   []string // Authorization of each peers request
}

func newPeersServer(t *testing.T) *peersServer {
	s := &peersServer{changed: make(chan struct{}), index: 1}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *peersServer) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/primary":
		s.mu.Lock()
		p := s.primary
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(p)
	case "/v1/cluster/peers":
		s.mu.Lock()
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		seen, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		for seen > 0 && seen >= s.index {
			ch := s.changed
			s.mu.Unlock()
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			case <-time.After(2 * time.Second):
			}
			s.mu.Lock()
			if seen >= s.index { // the wait ran out
				break
			}
		}
		w.Header().Set(wire.HeaderIndex, strconv.FormatUint(s.index, 10))
		peers := s.peers
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(peers)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (s *peersServer) set(primary *wire.Primary, peers []wire.Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if primary != nil {
		s.primary = *primary
	}
	if peers != nil {
		s.peers = peers
		s.index++
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *peersServer) authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.auths)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, 10*time.Second, cond)
}

func TestClient_FollowCandidates(t *testing.T) {
	a, b, d := newPeersServer(t), newPeersServer(t), newPeersServer(t)
	names := map[*peersServer]string{a: "node-a", b: "node-b", d: "node-d"}
	list := func(servers ...*peersServer) []wire.Peer {
		var out []wire.Peer
		for _, s := range servers {
			out = append(out, peer(names[s], s.URL, wire.SuffrageVoter))
		}
		return out
	}
	for _, s := range []*peersServer{a, b, d} {
		s.set(&wire.Primary{Known: true, Holder: "node-a", Generation: 1, URL: a.URL}, list(a, b))
	}
	root := t.TempDir()
	join := Join{URL: a.URL, Machine: "mbp", Tokens: Tokens{ScopeMember: learnToken}}
	if err := WriteJoinFile(root, join); err != nil {
		t.Fatal(err)
	}
	joined, err := ReadJoinFile(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(ResolverConfig{Candidates: []Candidate{{Machine: "node-a", URL: a.URL}, {Machine: "node-b", URL: b.URL}}, Join: joined})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientConfig{Resolver: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var mu sync.Mutex
	var changes [][]Candidate
	wg.Go(func() {
		_ = c.FollowCandidates(ctx, CandidateRefresh{JoinRoot: root, OnChange: func(l []Candidate) {
			mu.Lock()
			changes = append(changes, l)
			mu.Unlock()
		}})
	})
	wg.Go(func() { _ = c.FollowPrimary(ctx) })

	fileLists := func(want ...string) func() bool {
		return func() bool {
			j, err := ReadJoinFile(root)
			if err != nil || j == nil {
				return false
			}
			var got []string
			for _, c := range j.Candidates {
				got = append(got, c.Machine)
			}
			return slices.Equal(got, want)
		}
	}
	// The first answer (same set as configured) is kept in the join file.
	waitUntil(t, "the join file lists node-a and node-b", fileLists("node-a", "node-b"))

	// node-b is replaced by node-d: the member follows, keeps it, trusts it.
	for _, s := range []*peersServer{a, b, d} {
		s.set(nil, list(a, d))
	}
	waitUntil(t, "the join file lists node-a and node-d", fileLists("node-a", "node-d"))
	got := r.Candidates()
	if len(got) != 2 || got[1].Machine != "node-d" || got[1].URL != d.URL {
		t.Fatalf("Candidates() = %+v, want node-a and node-d", got)
	}
	if addr, _ := r.AddressFor(d.URL); addr.Token != learnToken {
		t.Errorf("AddressFor(node-d) token = %q, want the join file's", addr.Token)
	}
	mu.Lock()
	if len(changes) == 0 || changes[len(changes)-1][1].Machine != "node-d" {
		t.Errorf("OnChange calls = %+v, want the last with node-d", changes)
	}
	mu.Unlock()
	j, _ := ReadJoinFile(root)
	if j.URL != join.URL || j.Machine != "mbp" || j.Tokens[ScopeMember] != learnToken {
		t.Errorf("join file after the refresh = %+v, want its url, machine and token kept", j)
	}

	// The primary watch moved to the new list: node-d's claim is followed.
	d.set(&wire.Primary{Known: true, Holder: "node-d", Generation: 2, URL: d.URL}, nil)
	waitUntil(t, "the client targets node-d", func() bool {
		target, err := c.Target(ctx)
		return err == nil && target.URL == d.URL && target.Token == learnToken
	})
	// Every list was asked for with the token; node-b was never asked after it left.
	for _, s := range []*peersServer{a, d} {
		for _, auth := range s.authorizations() {
			if !strings.HasSuffix(auth, learnToken) {
				t.Errorf("a peers request carried %q, want the join file's token", auth)
			}
		}
	}
}
