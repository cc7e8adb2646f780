package apitest

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
)

// PKI is a certificate authority made for one test, with the files of the
// certificates it issued in a temporary directory.
type PKI struct {
	t      testing.TB
	Dir    string
	CA     certs.Pair
	CAFile string // ca.pem

	mu     sync.Mutex
	stores map[string]*certs.Store // guarded by mu
}

// NewPKI makes a CA and writes its certificate to Dir/ca.pem.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatalf("new CA: %v", err)
	}
	p := &PKI{t: t, Dir: t.TempDir(), CA: ca, stores: map[string]*certs.Store{}}
	p.CAFile = filepath.Join(p.Dir, "ca.pem")
	if err := os.WriteFile(p.CAFile, ca.Cert, 0o644); err != nil { //nolint:gosec // G306: a certificate is public
		t.Fatal(err)
	}
	return p
}

// Issue writes a new certificate for machine, valid for 127.0.0.1 and
// localhost, to Dir/<machine>.pem and Dir/<machine>-key.pem (replacing any
// earlier one) and returns the files.
func (p *PKI) Issue(machine string) certs.Files {
	p.t.Helper()
	pair, err := certs.NewCert(p.CA, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNS: []string{"localhost"}}, time.Now())
	if err != nil {
		p.t.Fatalf("issue a certificate for %s: %v", machine, err)
	}
	f := certs.Files{CA: p.CAFile, Cert: filepath.Join(p.Dir, machine+".pem"), Key: filepath.Join(p.Dir, machine+"-key.pem")}
	if err := os.WriteFile(f.Cert, pair.Cert, 0o644); err != nil { //nolint:gosec // G306: a certificate is public
		p.t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pair.Key, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// Store returns the certificate store of machine, issuing its certificate on
// first use.
func (p *PKI) Store(machine string) *certs.Store {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.stores[machine]; ok {
		return s
	}
	s, err := certs.Load(p.Issue(machine), machine)
	if err != nil {
		p.t.Fatalf("load the certificate of %s: %v", machine, err)
	}
	p.stores[machine] = s
	return s
}

// HTTPClient returns a client that trusts the CA and, when machine is not
// empty, presents a certificate for it.
func (p *PKI) HTTPClient(machine string) *http.Client {
	p.t.Helper()
	pool, err := certs.ParseCAs(p.CA.Cert)
	if err != nil {
		p.t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if machine != "" {
		f := p.Issue(machine)
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			p.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil}}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
