package apitest

import (
	"crypto/tls"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/internal/testutil"
)

// PKI is the test CA of internal/testutil (its Issue, CAFile, ClientTLS)
// with what a cluster of api.Servers needs: a certificate store per machine
// and HTTPS clients.
type PKI struct {
	*testutil.PKI
	t testing.TB

	mu     sync.Mutex
	stores map[string]*certs.Store // guarded by mu
}

// certDNS are the DNS names of the certificates the wrappers issue, besides
// the machine's own.
var certDNS = []string{"localhost"}

// NewPKI makes a CA and writes its certificate to CAFile.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	return &PKI{PKI: testutil.NewPKI(t), t: t, stores: map[string]*certs.Store{}}
}

// Store returns the certificate store of machine, issuing its certificate
// (valid for machine, localhost and 127.0.0.1) on first use.
func (p *PKI) Store(machine string) *certs.Store {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.stores[machine]; ok {
		return s
	}
	s, err := certs.Load(p.Issue(machine, certDNS...), machine)
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
	pool, err := certs.ParseCAs(p.CACert())
	if err != nil {
		p.t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if machine != "" {
		f := p.Issue(machine, certDNS...)
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			p.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil}}
}
