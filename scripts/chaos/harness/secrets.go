package harness

// The cluster's secrets: its tokens and, with TLS, its CA and certificates.

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/elanous/elanous-node/wire"
)

// makeTLS makes the cluster's CA and a certificate per node (its name and
// its address) in dir with the binary's "tls ca" and "tls cert", and returns
// a client configuration that trusts the CA.
func makeTLS(bin, dir string, ips []string) (*tls.Config, error) {
	run := func(args ...string) error {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("elanous-node %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("tls", "ca", "--out", dir); err != nil {
		return nil, err
	}
	for i, ip := range ips {
		if err := run("tls", "cert", "--ca-dir", dir, "--machine", NodeName(i), "--ip", ip, "--out", dir); err != nil {
			return nil, err
		}
	}
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", filepath.Join(dir, "ca.pem"))
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS returns a client configuration that trusts the cluster's CA, or
// nil for a plaintext cluster.
func (c *Cluster) ClientTLS() *tls.Config { return c.tls }

// CAFile returns the path of the cluster CA's certificate (PEM), or "" for
// a plaintext cluster.
func (c *Cluster) CAFile() string {
	if c.tls == nil || c.cfg.Dir == "" {
		return ""
	}
	return filepath.Join(c.cfg.Dir, "tls", "ca.pem")
}

// NewTokens draws the three cluster tokens.
func NewTokens() (wire.TokensFile, error) {
	var t wire.TokensFile
	for _, p := range []*string{&t.Admin, &t.Member, &t.Query} {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return t, err
		}
		*p = hex.EncodeToString(b)
	}
	return t, nil
}

// WriteTokens writes a tokens file with mode 0600, creating its directory.
func WriteTokens(path string, t wire.TokensFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(t)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}
