package wire

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParseCAs decodes every PEM "CERTIFICATE" block of data into a pool: the CA
// bundle a candidate's tls.ca_file, a client's --ca-file and a join file's
// "ca" hold. Other PEM blocks are skipped. It fails when a certificate does
// not parse or there is none, so a bundle that would trust nothing is never
// taken for one.
func ParseCAs(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CA certificate: %w", err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return pool, nil
}
