package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// Default lifetimes, as consul tls ca create / cert create use.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// backdate is how far before now a certificate becomes valid, so a peer
// whose clock is a little behind accepts a certificate issued a moment ago.
const backdate = time.Hour

// PEM block types written by this package.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY" // PKCS #8
)

// Pair is a certificate and its private key, both PEM-encoded.
type Pair struct {
	Cert []byte
	Key  []byte
}

// NewCA creates a self-signed certificate authority: an ECDSA P-256 key and a
// CA certificate (may sign certificates, not other CAs) valid from now for
// validity (DefaultCAValidity when 0), named "elanous-node CA <serial>".
func NewCA(now time.Time, validity time.Duration) (Pair, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, serial, err := newKey("CA key")
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "elanous-node CA " + shortSerial(serial), Organization: []string{"elanous-node"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Pair{}, fmt.Errorf("sign CA certificate: %w", err)
	}
	return encodePair(der, key)
}

// CertRequest describes a node or client certificate.
type CertRequest struct {
	// Machine is the name the certificate is for: its common name and its
	// first DNS subject alternative name, the name the Raft transport checks.
	Machine string
	// IPs and DNS are further subject alternative names: the addresses and
	// host names clients use in the candidate's https:// URL.
	IPs []net.IP
	DNS []string
	// Validity is the lifetime from now; DefaultCertValidity when 0.
	Validity time.Duration
}

// NewCert issues a certificate for req signed by ca: an ECDSA P-256 key and a
// certificate valid for both server and client authentication (a candidate
// is a TLS server to its peers and members, and a TLS client when it dials a
// peer or forwards to the leader).
func NewCert(ca Pair, req CertRequest, now time.Time) (Pair, error) {
	if req.Machine == "" || strings.ContainsAny(req.Machine, " \t\r\n/") {
		return Pair{}, fmt.Errorf("certificate machine name %q is not a host name", req.Machine)
	}
	if req.Validity <= 0 {
		req.Validity = DefaultCertValidity
	}
	caCert, caKey, err := ParsePair(ca)
	if err != nil {
		return Pair{}, fmt.Errorf("CA: %w", err)
	}
	if !caCert.IsCA {
		return Pair{}, errors.New("CA: the certificate is not a certificate authority")
	}
	key, serial, err := newKey("key")
	if err != nil {
		return Pair{}, err
	}
	dns := []string{req.Machine}
	for _, d := range req.DNS {
		if d != req.Machine {
			dns = append(dns, d)
		}
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter // a certificate cannot outlive its CA
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Machine, Organization: []string{"elanous-node"}},
		DNSNames:     dns,
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("sign certificate: %w", err)
	}
	return encodePair(der, key)
}

// ParsePair decodes a PEM certificate and its PEM private key (PKCS #8, or
// SEC 1 "EC PRIVATE KEY") and checks that they belong together.
func ParsePair(p Pair) (*x509.Certificate, any, error) {
	block, _ := pem.Decode(p.Cert)
	if block == nil || block.Type != pemCertificate {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse certificate: %w", err)
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("no PEM private key")
	}
	var key any
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("unsupported private key type")
	}
	if eq, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(signer.Public()) {
		return nil, nil, errors.New("the private key does not match the certificate")
	}
	return cert, key, nil
}

func encodePair(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encode key: %w", err)
	}
	return Pair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: kder}),
	}, nil
}

// newKey generates the ECDSA P-256 key of a certificate and draws its
// serial number; what names the key in the error of a failed generation.
func newKey(what string) (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s: %w", what, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

// newSerial draws a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("draw serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func shortSerial(n *big.Int) string {
	s := n.Text(16)
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}
