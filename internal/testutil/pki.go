package testutil

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
)

// PKI is a CA and the files of the certificates it issued, in a temp dir.
type PKI struct {
	t   *testing.T
	dir string
	ca  certs.Pair
}

// NewPKI makes a CA whose files live in t.TempDir().
func NewPKI(t *testing.T) *PKI {
	t.Helper()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{t: t, dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(p.CAFile(), ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// CAFile is the path of the CA certificate.
func (p *PKI) CAFile() string { return filepath.Join(p.dir, "ca.pem") }

// Issue writes a certificate for machine (SAN machine and 127.0.0.1) and
// returns the files of a store for it.
func (p *PKI) Issue(machine string) certs.Files {
	p.t.Helper()
	pair, err := certs.NewCert(p.ca, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	f := certs.Files{CA: p.CAFile(), Cert: filepath.Join(p.dir, machine+".pem"), Key: filepath.Join(p.dir, machine+"-key.pem")}
	if err := os.WriteFile(f.Cert, pair.Cert, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pair.Key, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// ClientTLS returns a client TLS config presenting machine's certificate of
// this CA (or none when machine is ""), trusting nothing: the attacker does
// not care who answers.
func (p *PKI) ClientTLS(machine string) *tls.Config {
	p.t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if machine != "" {
		f := p.Issue(machine)
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			p.t.Fatal(err)
		}
		// Present it whatever CAs the server says it accepts.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	return cfg
}

// FreeAddrs returns n loopback addresses whose ports were free a moment ago.
func FreeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}
