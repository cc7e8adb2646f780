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

// PKI is a certificate authority made for one test, with the files of the
// certificates it issued in t.TempDir(). It is the one test CA of the
// project; api/apitest wraps it with certificate stores and HTTPS clients.
type PKI struct {
	t   testing.TB
	dir string
	ca  certs.Pair
}

// NewPKI makes a CA and writes its certificate to CAFile.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatalf("new CA: %v", err)
	}
	p := &PKI{t: t, dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(p.CAFile(), ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Dir is the directory of the CA's and the certificates' files.
func (p *PKI) Dir() string { return p.dir }

// CAFile is the path of the CA certificate (Dir/ca.pem).
func (p *PKI) CAFile() string { return filepath.Join(p.dir, "ca.pem") }

// CACert is the CA certificate, PEM-encoded.
func (p *PKI) CACert() []byte { return p.ca.Cert }

// Issue writes a new certificate for machine, valid for the DNS names
// machine and dns and for 127.0.0.1, to Dir/<machine>.pem and
// Dir/<machine>-key.pem (replacing any earlier one) and returns the files
// of a store for it.
func (p *PKI) Issue(machine string, dns ...string) certs.Files {
	p.t.Helper()
	pair, err := certs.NewCert(p.ca, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNS: dns}, time.Now())
	if err != nil {
		p.t.Fatalf("issue a certificate for %s: %v", machine, err)
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

// FreeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}
