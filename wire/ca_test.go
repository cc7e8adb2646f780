package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestParseCAs(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	other := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("not a certificate")}))
	bad := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}))
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"one certificate", cert, ""},
		{"other blocks are skipped", other + cert, ""},
		{"two certificates", cert + cert, ""},
		{"empty", "", "no PEM certificate"},
		{"no certificate block", other, "no PEM certificate"},
		{"not PEM", "hello", "no PEM certificate"},
		{"a certificate that does not parse", cert + bad, "parse CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := ParseCAs([]byte(tc.data))
			switch {
			case tc.wantErr == "" && (err != nil || pool == nil):
				t.Fatalf("ParseCAs() = %v, %v; want a pool", pool, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ParseCAs() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
