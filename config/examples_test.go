package config

import (
	"path/filepath"
	"testing"
)

// The example configurations shipped in deploy/examples must load and validate.
func TestLoad_DeployExamples(t *testing.T) {
	files, err := filepath.Glob("../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("Glob() = %v, %v, want example configs", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
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
				t.Errorf("tls = %+v, want the examples to run with TLS and without allow_plaintext", cfg.TLS)
			}
		})
	}
}
