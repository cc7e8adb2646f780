package main

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0.0.0.0:31413", "127.0.0.1:31413"},
		{":31413", "127.0.0.1:31413"},
		{"[::]:31413", "[::1]:31413"},
		{"10.0.0.1:31413", "10.0.0.1:31413"},
		{"node-a:31413", "node-a:31413"},
	}
	for _, tt := range tests {
		if got := loopbackAddr(tt.in); got != tt.want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHealthCmd(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/health", r.URL.Path == "/v1/ready" && ready.Load():
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/v1/ready":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"no-leader","message":"no leader"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	if _, _, err := runRoot(t, "health", "--url", srv.URL); err != nil {
		t.Errorf("health error = %v, want nil", err)
	}
	_, _, err := runRoot(t, "health", "--ready", "--url", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "no-leader") {
		t.Errorf("health --ready before ready error = %v, want a 503 no-leader", err)
	}
	ready.Store(true)
	if _, _, err := runRoot(t, "health", "--ready", "--url", srv.URL); err != nil {
		t.Errorf("health --ready once ready error = %v, want nil", err)
	}
	srv.Close()
	if _, _, err := runRoot(t, "health", "--url", srv.URL); err == nil {
		t.Error("health against a closed port error = nil, want an error")
	}
}

// With tls.* in the configuration, health speaks https to http.addr on
// loopback and verifies the node's certificate, which names node.id (not
// 127.0.0.1), against the CA.
func TestHealthCmd_TLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := certs.NewCert(ca, certs.CertRequest{Machine: "node-a"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node-a.pem"), filepath.Join(dir, "node-a-key.pem")
	for path, data := range map[string][]byte{caFile: ca.Cert, certFile: pair.Cert, keyFile: pair.Key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kp, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := filepath.Join(dir, "elanous.yaml")
	yaml := "node: { id: node-a }\nhttp: { addr: \"" + strings.TrimPrefix(srv.URL, "https://") + "\" }\n" +
		"tls: { ca_file: " + caFile + ", cert_file: " + certFile + ", key_file: " + keyFile + " }\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runRoot(t, "health", "--config", cfg); err != nil {
		t.Errorf("health with tls.* error = %v, want nil", err)
	}
	other, _ := certs.NewCA(time.Now(), 0)
	wrong := filepath.Join(dir, "wrong.pem")
	if err := os.WriteFile(wrong, other.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runRoot(t, "health", "--config", cfg, "--ca-file", wrong); err == nil {
		t.Error("health with the wrong CA error = nil, want a failed verification")
	}
}
