package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/cluster/certs"
)

func runTLSCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newTLSCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// tls ca and tls cert write the documented files with the documented modes,
// a certificate a node loads for its machine, and refuse to overwrite.
func TestTLSCmd_CAAndCert(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	nodeDir := filepath.Join(t.TempDir(), "node-a")
	if out, err := runTLSCmd(t, "ca", "--out", caDir); err != nil {
		t.Fatalf("tls ca: %v\n%s", err, out)
	}
	if m := fileMode(t, filepath.Join(caDir, "ca-key.pem")); m != 0o600 {
		t.Errorf("ca-key.pem mode %04o, want 0600", m)
	}
	if _, err := runTLSCmd(t, "ca", "--out", caDir); err == nil {
		t.Error("tls ca over an existing CA succeeded, want a refusal without --force")
	}
	out, err := runTLSCmd(t, "cert", "--ca-dir", caDir, "--machine", "node-a", "--ip", "10.0.0.1", "--ip", "127.0.0.1",
		"--dns", "a.example", "--out", nodeDir)
	if err != nil {
		t.Fatalf("tls cert: %v\n%s", err, out)
	}
	certPath, keyPath := filepath.Join(nodeDir, "node-a.pem"), filepath.Join(nodeDir, "node-a-key.pem")
	if m := fileMode(t, keyPath); m != 0o600 {
		t.Errorf("node-a-key.pem mode %04o, want 0600", m)
	}
	data, _ := os.ReadFile(certPath)
	block, _ := pem.Decode(data)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(leaf.DNSNames, []string{"node-a", "a.example"}) || len(leaf.IPAddresses) != 2 {
		t.Errorf("SANs %v %v, want [node-a a.example] and two IPs", leaf.DNSNames, leaf.IPAddresses)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("key usages %v, want server and client", leaf.ExtKeyUsage)
	}
	if _, err := certs.Load(certs.Files{CA: filepath.Join(caDir, "ca.pem"), Cert: certPath, Key: keyPath}, "node-a"); err != nil {
		t.Errorf("a node cannot load the issued certificate: %v", err)
	}
	if _, err := runTLSCmd(t, "cert", "--ca-dir", caDir, "--machine", "node-a", "--out", nodeDir); err == nil {
		t.Error("tls cert over an existing certificate succeeded, want a refusal without --force")
	}
	if _, err := runTLSCmd(t, "cert", "--ca-dir", caDir, "--machine", "node-a", "--out", nodeDir, "--force"); err != nil {
		t.Errorf("tls cert --force: %v", err)
	}
	if _, err := runTLSCmd(t, "cert", "--ca-dir", t.TempDir(), "--machine", "node-b", "--out", nodeDir); err == nil ||
		!strings.Contains(err.Error(), "elanous-node tls ca") {
		t.Errorf("tls cert without a CA error = %v, want a hint to make one", err)
	}
	if _, err := runTLSCmd(t, "cert", "--ca-dir", caDir, "--machine", "no/slash", "--out", nodeDir); err == nil {
		t.Error("tls cert with an invalid machine name succeeded")
	}
}
