package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The flags deploy/ relies on: compose runs "init --if-missing" on every up,
// Kubernetes installs a group-readable Secret with "init --from".

func TestInitCmd_IfMissingKeepsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control", "tokens.json")
	if _, _, err := runRoot(t, "init", "--file", path, "--if-missing"); err != nil {
		t.Fatalf("init --if-missing on no file error = %v", err)
	}
	first := readRaw(t, path)
	stdout, _, err := runRoot(t, "init", "--file", path, "--if-missing")
	if err != nil {
		t.Fatalf("init --if-missing on an existing file error = %v, want nil", err)
	}
	if !strings.Contains(stdout, "Kept") {
		t.Errorf("init --if-missing output = %q, want it to say the file was kept", stdout)
	}
	if got := readRaw(t, path); got != first {
		t.Error("init --if-missing replaced an existing tokens file")
	}
	if _, _, err := runRoot(t, "init", "--file", path, "--if-missing", "--force"); err == nil {
		t.Error("init --if-missing --force error = nil, want the flags refused together")
	}
}

func TestInitCmd_FromInstallsTokens(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "secret", "tokens.json")
	if _, _, err := runRoot(t, "init", "--file", src); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o440); err != nil { // as a Kubernetes Secret with fsGroup is mounted
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "data", "control", "tokens.json")
	if _, _, err := runRoot(t, "init", "--from", src, "--file", dst); err != nil {
		t.Fatalf("init --from error = %v", err)
	}
	if got, want := readRaw(t, dst), readRaw(t, src); got != want {
		t.Error("init --from wrote other tokens than the source's")
	}
	got, err := readTokensFile(dst)
	if err != nil {
		t.Fatalf("readTokensFile(installed) error = %v", err)
	}
	if got != readRaw(t, src) {
		t.Error("readTokensFile(installed) differs from the source")
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"admin":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runRoot(t, "init", "--from", bad, "--file", filepath.Join(dir, "other.json")); err == nil {
		t.Error("init --from a malformed file error = nil, want refused")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.json")); err == nil {
		t.Error("init --from a malformed file wrote a tokens file")
	}
}
