package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Files names the PEM files of a node or client: the configuration keys
// tls.ca_file, tls.cert_file and tls.key_file.
type Files struct {
	// CA holds the certificate authorities peers are verified against; during
	// a CA rotation it holds the old and the new CA one after the other.
	CA string
	// Cert and Key are this process's certificate and private key. Both or
	// neither; a client that presents no certificate leaves them empty.
	Cert string
	Key  string
}

// Material is one loaded, consistent set of TLS files. It is never modified
// after Load or Reload builds it.
type Material struct {
	// Roots holds every certificate of the CA file.
	Roots *x509.CertPool
	// Cert is the key pair to present; nil when Files names none.
	Cert *tls.Certificate
	// Leaf is Cert's parsed certificate; nil when Cert is.
	Leaf *x509.Certificate
}

// Store holds a process's TLS material and replaces it atomically on Reload,
// so handshakes that start after a reload use the new files and connections
// already open are not disturbed. Its methods are safe for concurrent use.
type Store struct {
	files   Files
	machine string
	cur     atomic.Pointer[Material]
}

// MinVersion is the lowest TLS version the cluster's servers accept.
const MinVersion = tls.VersionTLS13

// Load reads files and checks them: the CA file must hold at least one
// certificate; a certificate and key must match. When machine is not empty
// (a candidate), the certificate is required, must name machine as a DNS
// subject alternative name — the name the Raft transport checks — and must
// chain to the CA for both server and client authentication, now.
func Load(files Files, machine string) (*Store, error) {
	s := &Store{files: files, machine: machine}
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// Reload reads the files again and, when they pass Load's checks, swaps them
// in: new handshakes use them from then on. On any error the material in use
// is kept and the error says which file is wrong.
func (s *Store) Reload() error {
	m, err := s.read()
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Current returns the material in use.
func (s *Store) Current() *Material { return s.cur.Load() }

// Files returns the paths the store reads.
func (s *Store) Files() Files { return s.files }

func (s *Store) read() (*Material, error) {
	f := s.files
	if f.CA == "" {
		return nil, errors.New("tls.ca_file is not set")
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("read tls.ca_file: %w", err)
	}
	roots, err := ParseCAs(caPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.ca_file %s: %w", f.CA, err)
	}
	m := &Material{Roots: roots}
	switch {
	case f.Cert == "" && f.Key == "":
		if s.machine != "" {
			return nil, errors.New("tls.cert_file and tls.key_file are required")
		}
		return m, nil
	case f.Cert == "":
		return nil, errors.New("tls.key_file is set but tls.cert_file is not")
	case f.Key == "":
		return nil, errors.New("tls.cert_file is set but tls.key_file is not")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load tls.cert_file %s and tls.key_file %s: %w", f.Cert, f.Key, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls.cert_file %s: %w", f.Cert, err)
		}
	}
	m.Cert, m.Leaf = &cert, cert.Leaf
	if s.machine == "" {
		return m, nil
	}
	if !slices.Contains(m.Leaf.DNSNames, s.machine) {
		return nil, fmt.Errorf("tls.cert_file %s names %v, not this node %q; issue one with: elanous-node tls cert --machine %s",
			f.Cert, m.Leaf.DNSNames, s.machine, s.machine)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates(cert), KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := m.Leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("tls.cert_file %s does not verify against tls.ca_file %s: %w", f.Cert, f.CA, err)
		}
	}
	return m, nil
}

// intermediates returns the chain certificates after the leaf in a key pair.
func intermediates(cert tls.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}

// ParseCAs decodes every PEM certificate in data into a pool. It fails when
// there is none or one does not parse (wire.ParseCAs, the rule every client
// applies to a CA bundle too).
func ParseCAs(data []byte) (*x509.CertPool, error) { return wire.ParseCAs(data) }

// ServerConfig returns the configuration of a TLS listener. Every handshake
// takes the store's current certificate and CA (GetConfigForClient), so a
// Reload reaches new connections at once. clientAuth says whether clients
// must present a certificate of the CA (tls.RequireAndVerifyClientCert) or
// need not (tls.NoClientCert).
func (s *Store) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.Current()
			if m.Cert == nil {
				return nil, errors.New("no certificate to present")
			}
			return &tls.Config{
				MinVersion:   MinVersion,
				Certificates: []tls.Certificate{*m.Cert},
				ClientAuth:   clientAuth,
				ClientCAs:    m.Roots,
				NextProtos:   []string{"http/1.1"},
			}, nil
		},
	}
}

// ClientConfig returns the configuration of one outgoing connection to
// serverName: the server's certificate must chain to the current CA and name
// serverName; the store's certificate, if any, is presented when the server
// asks for one (read at the handshake, so a Reload applies to it).
func (s *Store) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		RootCAs:    s.Current().Roots,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := s.Current(); m.Cert != nil {
				return m.Cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}

// DialTLSContext returns a dial function for http.Transport.DialTLSContext:
// it connects with d and completes a handshake with ClientConfig for the
// host of addr, so an HTTPS client verifies servers against the current CA
// and presents the current certificate, across reloads.
func (s *Store) DialTLSContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, s.ClientConfig(host))
		hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
		defer cancel()
		if err := conn.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// HandshakeTimeout bounds one TLS handshake, in either direction.
const HandshakeTimeout = 5 * time.Second
