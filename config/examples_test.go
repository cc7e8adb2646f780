package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// The example configurations shipped in deploy/examples, and the compose
// deployment's deploy/node-*.yaml, must load and validate, and run TLS: each
// candidate's own certificate and key, https everywhere, no allow_plaintext.
func TestLoad_DeployExamples(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../deploy/examples/*.yaml", "../deploy/node-*.yaml"} {
		found, err := filepath.Glob(pattern)
		if err != nil || len(found) == 0 {
			t.Fatalf("Glob(%s) = %v, %v, want configs", pattern, found, err)
		}
		files = append(files, found...)
	}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, "../"), func(t *testing.T) {
			cfg, err := Load(LoadOptions{File: f, Env: []string{}})
			if err != nil {
				t.Fatalf("Load(%s) error = %v", f, err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate() error = %v", err)
			}
			if len(cfg.Cluster.Candidates) != 3 {
				t.Fatalf("candidates = %d, want 3", len(cfg.Cluster.Candidates))
			}
			if !cfg.TLS.Enabled() || cfg.TLS.AllowPlaintext {
				t.Errorf("tls = %+v, want TLS and no allow_plaintext", cfg.TLS)
			}
			if want := "/etc/elanous/tls/" + cfg.Node.ID; cfg.TLS.CertFile != want+".pem" || cfg.TLS.KeyFile != want+"-key.pem" ||
				cfg.TLS.CAFile != "/etc/elanous/tls/ca.pem" {
				t.Errorf("tls = %+v, want ca.pem, %s.pem and %s-key.pem in /etc/elanous/tls", cfg.TLS, cfg.Node.ID, cfg.Node.ID)
			}
			for _, c := range cfg.Cluster.Candidates {
				if !strings.HasPrefix(c.URL, "https://") {
					t.Errorf("candidate %s url %q, want https://", c.Machine, c.URL)
				}
			}
		})
	}
}
