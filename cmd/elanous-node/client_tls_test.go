package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/member"
)

// newFakeTLSCandidate is a fakeCandidate serving HTTPS with a certificate
// of ca for 127.0.0.1.
func newFakeTLSCandidate(t *testing.T, ca certs.Pair, machine, leader string, gen uint64) *fakeCandidate {
	t.Helper()
	pair, err := certs.NewCert(ca, certs.CertRequest{Machine: machine, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCandidate{machine: machine, leader: leader, gen: gen}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func writeCA(t *testing.T, ca certs.Pair) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every client command takes the CA from --ca-file or ELANOUS_CA_FILE; with
// the wrong CA it refuses before any request (and token) reaches a
// candidate, and with a CA it refuses http:// candidates.
func TestClientCmd_CAFile(t *testing.T) {
	ca, _ := certs.NewCA(time.Now(), 0)
	wrong, _ := certs.NewCA(time.Now(), 0)
	a := newFakeTLSCandidate(t, ca, "node-a", "node-a", 3)
	b := newFakeTLSCandidate(t, ca, "node-b", "node-a", 3)
	caFile, wrongFile := writeCA(t, ca), writeCA(t, wrong)
	cands := "node-a=" + a.URL + ",node-b=" + b.URL
	t.Setenv("ELANOUS_TOKEN", cliTokenA)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, args := range [][]string{
		{"status", "--candidates", cands, "--ca-file", wrongFile},
		{"lease", "list", "--candidates", cands, "--ca-file", wrongFile},
		{"token", "list", "--candidates", cands, "--ca-file", wrongFile},
		{"resources", "list", "--candidates", cands, "--ca-file", wrongFile},
	} {
		if out, _, err := runCLI(ctx, args...); err == nil {
			t.Errorf("%v with the wrong CA succeeded:\n%s", args, out)
		}
	}
	if got := append(a.seen(), b.seen()...); len(got) != 0 {
		t.Fatalf("with the wrong CA the candidates received %q, want nothing", got)
	}

	_, _, err := runCLI(ctx, "status", "--candidates", "http://127.0.0.1:1", "--ca-file", caFile)
	if err == nil || !strings.Contains(err.Error(), "plaintext http but a CA is configured") {
		t.Errorf("status with a CA and an http:// candidate error = %v, want a refusal", err)
	}

	out, stderr, err := runCLI(ctx, "status", "--candidates", cands, "--ca-file", caFile)
	if err != nil || !strings.Contains(out, "primary: node-a (generation 3)") {
		t.Fatalf("status --ca-file = %v\n%s\n%s", err, out, stderr)
	}
	t.Setenv(caFileEnv, caFile)
	if out, _, err := runCLI(ctx, "lease", "list", "--candidates", cands); err != nil {
		t.Fatalf("lease list with %s = %v\n%s", caFileEnv, err, out)
	}
}

// join --ca-file writes the CA into the join file, and a command with
// nothing but the join file then verifies the candidate against it.
func TestJoinCmd_CarriesCA(t *testing.T) {
	ca, _ := certs.NewCA(time.Now(), 0)
	a := newFakeTLSCandidate(t, ca, "node-a", "node-a", 3)
	dataDir := t.TempDir()
	tokenFile := writeSecret(t, cliTokenB, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("ELANOUS_TOKEN", "")

	if _, _, err := runCLI(ctx, "join", "--url", a.URL, "--token-file", tokenFile, "--machine", "mbp", "--data-dir", dataDir); err == nil ||
		!strings.Contains(err.Error(), "--ca-file") {
		t.Errorf("join of an https URL without a CA error = %v, want a hint naming --ca-file", err)
	}
	out, stderr, err := runCLI(ctx, "join", "--url", a.URL, "--token-file", tokenFile, "--machine", "mbp", "--data-dir", dataDir, "--ca-file", writeCA(t, ca))
	if err != nil {
		t.Fatalf("join --ca-file = %v\n%s\n%s", err, out, stderr)
	}
	j, err := member.ReadJoinFile(dataDir)
	if err != nil || string(j.CA) != string(ca.Cert) {
		t.Fatalf("join file = %+v, %v; want the CA in it", j, err)
	}
	if out, stderr, err := runCLI(ctx, "resources", "list", "--data-dir", dataDir); err != nil {
		t.Fatalf("resources list with the join file's CA = %v\n%s\n%s", err, out, stderr)
	}
	seen := a.seen()
	if last := seen[len(seen)-1]; !strings.HasPrefix(last, "GET /v1/resources") || !strings.Contains(last, "auth="+cliTokenB) {
		t.Errorf("last request %q, want the list with the joined token", last)
	}
}
