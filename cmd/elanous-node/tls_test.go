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

// tls ca --if-missing keeps a CA; tls cert --if-missing keeps a certificate
// only when it is what the command would issue, and --with-ca puts the CA
// certificate, never its key, beside the pair: what deploy/compose.yaml runs
// on every "up".
func TestTLSCmd_IfMissingAndWithCA(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	if out, err := runTLSCmd(t, "ca", "--if-missing", "--out", caDir); err != nil || !strings.Contains(out, "wrote") {
		t.Fatalf("tls ca --if-missing on an empty directory = %q, %v, want a new CA", out, err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	if out, err := runTLSCmd(t, "ca", "--if-missing", "--out", caDir); err != nil || !strings.Contains(out, "kept") {
		t.Errorf("tls ca --if-missing over a CA = %q, %v, want it kept", out, err)
	}
	if again, _ := os.ReadFile(filepath.Join(caDir, "ca.pem")); !bytes.Equal(again, caPEM) {
		t.Error("tls ca --if-missing replaced the CA")
	}
	if _, err := runTLSCmd(t, "ca", "--if-missing", "--force", "--out", caDir); err == nil {
		t.Error("tls ca --if-missing --force succeeded, want them refused together")
	}
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runTLSCmd(t, "ca", "--if-missing", "--out", half); err == nil {
		t.Error("tls ca --if-missing over half a CA succeeded")
	}

	nodeDir := filepath.Join(t.TempDir(), "node-a")
	issue := []string{"cert", "--if-missing", "--with-ca", "--ca-dir", caDir, "--machine", "node-a",
		"--ip", "10.77.1.11", "--ip", "127.0.0.1", "--dns", "localhost", "--out", nodeDir}
	if out, err := runTLSCmd(t, issue...); err != nil || !strings.Contains(out, "wrote") {
		t.Fatalf("tls cert --if-missing --with-ca = %q, %v, want a new certificate", out, err)
	}
	entries, _ := os.ReadDir(nodeDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ca.pem", "node-a-key.pem", "node-a.pem"}) {
		t.Errorf("--with-ca wrote %v, want ca.pem, node-a-key.pem and node-a.pem (never ca-key.pem)", names)
	}
	if got, _ := os.ReadFile(filepath.Join(nodeDir, "ca.pem")); !bytes.Equal(got, caPEM) {
		t.Error("--with-ca ca.pem differs from the CA's")
	}
	if m := fileMode(t, filepath.Join(nodeDir, "ca.pem")); m != 0o644 {
		t.Errorf("ca.pem mode %04o, want 0644", m)
	}
	if _, err := certs.Load(certs.Files{CA: filepath.Join(nodeDir, "ca.pem"), Cert: filepath.Join(nodeDir, "node-a.pem"),
		Key: filepath.Join(nodeDir, "node-a-key.pem")}, "node-a"); err != nil {
		t.Errorf("a node cannot load the directory --with-ca wrote: %v", err)
	}
	leaf, _ := os.ReadFile(filepath.Join(nodeDir, "node-a.pem"))
	if out, err := runTLSCmd(t, issue...); err != nil || !strings.Contains(out, "kept") {
		t.Errorf("tls cert --if-missing over the same certificate = %q, %v, want it kept", out, err)
	}
	if again, _ := os.ReadFile(filepath.Join(nodeDir, "node-a.pem")); !bytes.Equal(again, leaf) {
		t.Error("tls cert --if-missing replaced a certificate it should keep")
	}

	otherCA := filepath.Join(t.TempDir(), "ca2")
	if _, err := runTLSCmd(t, "ca", "--out", otherCA); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		args []string
		want string
	}{
		{"another name", []string{"cert", "--if-missing", "--with-ca", "--ca-dir", caDir, "--machine", "node-a",
			"--ip", "10.77.1.11", "--ip", "127.0.0.1", "--dns", "node-a.example", "--out", nodeDir}, "does not name node-a.example"},
		{"another address", []string{"cert", "--if-missing", "--with-ca", "--ca-dir", caDir, "--machine", "node-a",
			"--ip", "10.77.1.12", "--out", nodeDir}, "does not name 10.77.1.12"},
		{"another CA", []string{"cert", "--if-missing", "--ca-dir", otherCA, "--machine", "node-a", "--out", nodeDir}, "does not verify"},
		{"another CA's ca.pem", []string{"cert", "--with-ca", "--ca-dir", otherCA, "--machine", "node-b", "--out", nodeDir}, "is not this CA's certificate"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := runTLSCmd(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--force") {
				t.Errorf("tls %v error = %v, want %q and a hint to --force", tt.args, err, tt.want)
			}
		})
	}
	if again, _ := os.ReadFile(filepath.Join(nodeDir, "node-a.pem")); !bytes.Equal(again, leaf) {
		t.Error("a refused tls cert changed the certificate")
	}
	if err := os.Remove(filepath.Join(nodeDir, "node-a-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := runTLSCmd(t, issue...); err == nil || !strings.Contains(err.Error(), "only some of") {
		t.Errorf("tls cert --if-missing beside a missing key error = %v, want a refusal", err)
	}
}
