package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// issueFiles writes ca.pem, and machine's certificate and key, in dir.
func issueFiles(t *testing.T, dir string, ca Pair, machine string) Files {
	t.Helper()
	pair, err := NewCert(ca, CertRequest{Machine: machine, IPs: []net.IP{net.ParseIP("10.0.0.1")}, DNS: []string{machine + ".example"}}, time.Now())
	if err != nil {
		t.Fatalf("NewCert() error = %v", err)
	}
	f := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, machine+".pem"), Key: filepath.Join(dir, machine+"-key.pem")}
	writeFile(t, f.CA, ca.Cert)
	writeFile(t, f.Cert, pair.Cert)
	writeFile(t, f.Key, pair.Key)
	return f
}

func TestNewCert_NamesAndUsages(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(now, 0)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _, err := ParsePair(ca)
	if err != nil {
		t.Fatalf("ParsePair(CA) error = %v", err)
	}
	if !caCert.IsCA || caCert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA = %v, key %v; want a CA with an ECDSA key", caCert.IsCA, caCert.PublicKeyAlgorithm)
	}
	pair, err := NewCert(ca, CertRequest{Machine: "node-a", IPs: []net.IP{net.ParseIP("10.0.0.1")}, DNS: []string{"a.example"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _, err := ParsePair(pair)
	if err != nil {
		t.Fatalf("ParsePair() error = %v", err)
	}
	if !slices.Equal(leaf.DNSNames, []string{"node-a", "a.example"}) || len(leaf.IPAddresses) != 1 || leaf.Subject.CommonName != "node-a" {
		t.Errorf("names = %v %v %q, want [node-a a.example] [10.0.0.1] CN node-a", leaf.DNSNames, leaf.IPAddresses, leaf.Subject.CommonName)
	}
	pool, _ := ParseCAs(ca.Cert)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}, DNSName: "node-a"}); err != nil {
			t.Errorf("Verify(usage %v) error = %v", u, err)
		}
	}
	if leaf.NotAfter.After(caCert.NotAfter) {
		t.Errorf("certificate outlives its CA: %v > %v", leaf.NotAfter, caCert.NotAfter)
	}
	if _, err := NewCert(pair, CertRequest{Machine: "node-b"}, now); err == nil {
		t.Error("NewCert() signed by a non-CA certificate error = nil")
	}
}

func TestLoad_Checks(t *testing.T) {
	dir := t.TempDir()
	ca, _ := NewCA(time.Now(), 0)
	other, _ := NewCA(time.Now(), 0)
	good := issueFiles(t, dir, ca, "node-a")
	otherDir := t.TempDir()
	foreign := issueFiles(t, otherDir, other, "node-a")

	if _, err := Load(good, "node-a"); err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if _, err := Load(Files{CA: good.CA}, ""); err != nil {
		t.Errorf("Load(CA only, client) error = %v", err)
	}
	tests := []struct {
		name    string
		files   Files
		machine string
		want    string
	}{
		{"another node's name", good, "node-b", "not this node"},
		{"certificate of another CA", Files{CA: good.CA, Cert: foreign.Cert, Key: foreign.Key}, "node-a", "does not verify"},
		{"key of another certificate", Files{CA: good.CA, Cert: good.Cert, Key: foreign.Key}, "node-a", "load tls.cert_file"},
		{"no certificate on a node", Files{CA: good.CA}, "node-a", "required"},
		{"certificate without key", Files{CA: good.CA, Cert: good.Cert}, "", "tls.key_file"},
		{"no CA", Files{Cert: good.Cert, Key: good.Key}, "node-a", "tls.ca_file"},
		{"CA file without a certificate", Files{CA: good.Key, Cert: good.Cert, Key: good.Key}, "node-a", "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.files, tt.machine)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load() error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// Reload swaps in new files only when they pass the checks; a handshake
// after a reload presents the new certificate.
func TestStore_Reload(t *testing.T) {
	dir := t.TempDir()
	ca, _ := NewCA(time.Now(), 0)
	f := issueFiles(t, dir, ca, "node-a")
	s, err := Load(f, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	first := s.Current().Leaf.SerialNumber

	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.ServerConfig(tls.NoClientCert))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), s.ClientConfig("node-a"))
		if err != nil {
			t.Fatalf("Dial() error = %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first.String() {
		t.Fatalf("served serial %s, want %s", got, first)
	}

	// A broken rotation (key of another pair) is refused; the old pair stays.
	other := issueFiles(t, t.TempDir(), ca, "node-a")
	key, _ := os.ReadFile(other.Key)
	writeFile(t, f.Key, key)
	if err := s.Reload(); err == nil {
		t.Fatal("Reload() with a mismatched key error = nil")
	}
	if got := served(); got != first.String() {
		t.Errorf("after a failed reload served serial %s, want the old %s", got, first)
	}

	cert, _ := os.ReadFile(other.Cert)
	writeFile(t, f.Cert, cert)
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload() error = %v", err)
	}
	want := s.Current().Leaf.SerialNumber.String()
	if want == first.String() {
		t.Fatal("Reload() kept the old certificate")
	}
	if got := served(); got != want {
		t.Errorf("after Reload served serial %s, want the new %s", got, want)
	}
}
