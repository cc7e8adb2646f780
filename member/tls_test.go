package member

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
)

// tlsServer is an HTTPS server with a certificate of its own CA that
// records the Authorization header of every request reaching its handler.
type tlsServer struct {
	*httptest.Server
	ca   certs.Pair
	mu   sync.Mutex
	auth []string // guarded by mu
}

func newTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := certs.NewCert(ca, certs.CertRequest{Machine: "node-a", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{ca: ca}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/primary" {
			_, _ = w.Write([]byte(`{"known":true,"holder":"node-a","generation":3,"url":"` + s.URL + `"}`))
			return
		}
		_, _ = w.Write([]byte(`[]`))
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *tlsServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// A client built with the cluster CA reaches a server of that CA; with any
// other CA the handshake fails before the request — and its token — is
// written, and an http:// address is refused without a connection.
func TestNewHTTPClient_VerifiesBeforeSendingToken(t *testing.T) {
	srv := newTLSServer(t)
	other, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ca []byte, url string) error {
		httpc, err := NewHTTPClient(HTTPOptions{CA: ca})
		if err != nil {
			t.Fatalf("NewHTTPClient() error = %v", err)
		}
		c, err := NewClient(ClientConfig{URL: url, Token: tokenA, HTTPClient: httpc})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.ListResources(ctx, ResourceFilter{})
		return err
	}

	if err := list(other.Cert, srv.URL); !errors.Is(err, ErrUnreachable) {
		t.Errorf("ListResources() with another CA error = %v, want ErrUnreachable (a failed verification)", err)
	}
	plain := "http://" + strings.TrimPrefix(srv.URL, "https://")
	if err := list(srv.ca.Cert, plain); !errors.Is(err, ErrPlaintextURL) {
		t.Errorf("ListResources() at %s error = %v, want ErrPlaintextURL", plain, err)
	}
	if got := srv.requests(); len(got) != 0 {
		t.Fatalf("the server received %d requests (Authorization %q), want none", len(got), got)
	}

	if err := list(srv.ca.Cert, srv.URL); err != nil {
		t.Fatalf("ListResources() with the server's CA error = %v", err)
	}
	if got := srv.requests(); len(got) != 1 || got[0] != "Bearer "+tokenA {
		t.Errorf("requests = %q, want one carrying the token", got)
	}
}

// Resolution asks every candidate through the same verified client: a
// candidate whose certificate fails verification is skipped, like an
// unreachable one.
func TestResolver_SkipsUnverifiedCandidate(t *testing.T) {
	good, bad := newTLSServer(t), newTLSServer(t)
	httpc, err := NewHTTPClient(HTTPOptions{CA: good.ca.Cert})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(ResolverConfig{Role: ScopeMember, HTTPClient: httpc, Candidates: []Candidate{
		{Machine: "node-b", URL: bad.URL, Tokens: Tokens{ScopeMember: tokenA}},
		{Machine: "node-a", URL: good.URL, Tokens: Tokens{ScopeMember: tokenA}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := r.Resolve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if addr.Holder != "node-a" || addr.URL != good.URL {
		t.Errorf("Resolve() = %+v, want node-a at %s", addr, good.URL)
	}
	if n := len(bad.requests()); n != 0 {
		t.Errorf("the unverified candidate received %d requests, want none", n)
	}
}

func TestNewHTTPClient_RefusesBadCA(t *testing.T) {
	for _, ca := range [][]byte{[]byte("not pem"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), {}} {
		if _, err := NewHTTPClient(HTTPOptions{CA: ca}); !errors.Is(err, ErrInvalidCA) {
			t.Errorf("NewHTTPClient(CA %q) error = %v, want ErrInvalidCA", ca, err)
		}
	}
}

// The join file carries the CA ("ca"), which survives a round trip; a "ca"
// that is not a PEM certificate makes the file damaged.
func TestJoinFile_CA(t *testing.T) {
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	want := Join{URL: "https://10.0.0.1:31413", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}, CA: ca.Cert}
	if err := WriteJoinFile(root, want); err != nil {
		t.Fatalf("WriteJoinFile() error = %v", err)
	}
	got, err := ReadJoinFile(root)
	if err != nil {
		t.Fatalf("ReadJoinFile() error = %v", err)
	}
	if string(got.CA) != string(ca.Cert) || got.URL != want.URL {
		t.Errorf("ReadJoinFile() = %+v, want the CA back", got)
	}
	writeJoinRaw(t, root, `{"url":"https://a.test","machine":"mbp","token":"`+tokenA+`","ca":"nonsense"}`, 0o600)
	if _, err := ReadJoinFile(root); !errors.Is(err, ErrInvalidJoinFile) {
		t.Errorf("ReadJoinFile() with a bad ca error = %v, want ErrInvalidJoinFile", err)
	}
	writeJoinRaw(t, root, `{"url":"https://a.test","machine":"mbp","token":"`+tokenA+`","ca":7}`, 0o600)
	if _, err := ReadJoinFile(root); !errors.Is(err, ErrInvalidJoinFile) {
		t.Errorf("ReadJoinFile() with a numeric ca error = %v, want ErrInvalidJoinFile", err)
	}
	if err := WriteJoinFile(root, Join{URL: "https://a.test", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}, CA: []byte("x")}); !errors.Is(err, ErrInvalidCA) {
		t.Errorf("WriteJoinFile() with a bad CA error = %v, want ErrInvalidCA", err)
	}
}
