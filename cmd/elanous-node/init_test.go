package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

// runRoot executes the root command with args and returns its output.
func runRoot(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// readRaw decodes the tokens file at path without readTokensFile's checks.
func readRaw(t *testing.T, path string) wire.TokensFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tf wire.TokensFile
	if err := json.Unmarshal(data, &tf); err != nil {
		t.Fatalf("tokens file is not JSON: %v", err)
	}
	return tf
}

func TestInitCmd_CreatesTokensFile(t *testing.T) {
	t.Setenv("ELANOUS_TOKENS_FILE", "") // empty counts as unset: the path comes from --data-dir
	dataDir := filepath.Join(t.TempDir(), "data")
	stdout, _, err := runRoot(t, "init", "--data-dir", dataDir)
	if err != nil {
		t.Fatalf("init error = %v", err)
	}
	path := filepath.Join(dataDir, "control", "tokens.json")

	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("init did not create %s: %v", path, err)
	}
	if got := info.Mode().Perm(); got != 0o600 {
		t.Errorf("tokens file mode = %04o, want 0600", got)
	}
	dirInfo, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if got := dirInfo.Mode().Perm(); got != 0o700 {
		t.Errorf("control directory mode = %04o, want 0700", got)
	}

	tf, err := readTokensFile(path)
	if err != nil {
		t.Fatalf("readTokensFile() error = %v", err)
	}
	if tf.Admin == tf.Member || tf.Admin == tf.Query || tf.Member == tf.Query {
		t.Errorf("tokens are not distinct: %+v", tf)
	}
	for _, tok := range []string{tf.Admin, tf.Member, tf.Query} {
		if strings.Contains(stdout, tok) {
			t.Errorf("init printed a token; output:\n%s", stdout)
		}
	}
	for _, want := range []string{path, "jq -r .admin", "every other candidate"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("init output = %q, want it to contain %q", stdout, want)
		}
	}
	if n := entriesIn(t, filepath.Dir(path)); n != 1 {
		t.Errorf("control directory holds %d entries, want only tokens.json (temporary file left behind?)", n)
	}
}

// entriesIn is how many entries the directory dir holds.
func entriesIn(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestInitCmd_RefusesOverwriteWithoutForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if _, _, err := runRoot(t, "init", "--file", path); err != nil {
		t.Fatalf("first init error = %v", err)
	}
	first := readRaw(t, path)

	_, _, err := runRoot(t, "init", "--file", path)
	if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second init error = %v, want one saying the file exists and naming --force", err)
	}
	if got := readRaw(t, path); got != first {
		t.Errorf("init without --force changed the file")
	}

	if _, _, err := runRoot(t, "init", "--file", path, "--force"); err != nil {
		t.Fatalf("init --force error = %v", err)
	}
	replaced, err := readTokensFile(path)
	if err != nil {
		t.Fatalf("readTokensFile() after --force error = %v", err)
	}
	if replaced.Admin == first.Admin {
		t.Errorf("init --force kept the old admin token")
	}
	if n := entriesIn(t, filepath.Dir(path)); n != 1 {
		t.Errorf("directory holds %d entries after --force, want 1", n)
	}
}

func TestInitCmd_HonoursConfigTokensFile(t *testing.T) {
	t.Setenv("ELANOUS_TOKENS_FILE", "") // empty counts as unset: the path comes from the file
	dir := t.TempDir()
	want := filepath.Join(dir, "secrets", "tokens.json")
	cfgPath := filepath.Join(dir, "elanous.yaml")
	if err := os.WriteFile(cfgPath, []byte("tokens: { file: "+want+" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runRoot(t, "init", "--config", cfgPath); err != nil {
		t.Fatalf("init --config error = %v", err)
	}
	if _, err := readTokensFile(want); err != nil {
		t.Errorf("readTokensFile(%s) error = %v, want the file from tokens.file", want, err)
	}
}

func TestInitCmd_DataDirAndFileExclusive(t *testing.T) {
	dir := t.TempDir()
	_, _, err := runRoot(t, "init", "--data-dir", dir, "--file", filepath.Join(dir, "t.json"))
	if err == nil {
		t.Fatal("init with --data-dir and --file error = nil, want an error")
	}
}

func TestReadTokensFile_RefusesGroupReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tf, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTokensFile(path, tf); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = readTokensFile(path)
	if err == nil {
		t.Fatal("readTokensFile() of a 0644 file error = nil, want an error")
	}
	for _, want := range []string{"chmod 600", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("readTokensFile() error = %q, want it to contain %q", err, want)
		}
	}
}

func TestReadTokensFile_RejectsMalformed(t *testing.T) {
	a := strings.Repeat("a", 64)
	b := strings.Repeat("b", 64)
	c := strings.Repeat("c", 64)
	tests := []struct {
		name, body, want string
	}{
		{"uppercase hex", `{"admin":"` + strings.Repeat("A", 64) + `","member":"` + b + `","query":"` + c + `"}`, "admin token must be 64 lowercase hex"},
		{"short token", `{"admin":"` + a + `","member":"abc","query":"` + c + `"}`, "member token must be 64 lowercase hex"},
		{"not hex", `{"admin":"` + a + `","member":"` + b + `","query":"` + strings.Repeat("g", 64) + `"}`, "query token must be 64 lowercase hex"},
		{"missing token", `{"admin":"` + a + `","member":"` + b + `"}`, "query token must be 64 lowercase hex"},
		{"shared token", `{"admin":"` + a + `","member":"` + a + `","query":"` + c + `"}`, "admin and member tokens must differ"},
		{"unknown field", `{"admin":"` + a + `","member":"` + b + `","query":"` + c + `","root":"x"}`, "unknown field"},
		{"trailing data", `{"admin":"` + a + `","member":"` + b + `","query":"` + c + `"} {}`, "trailing data"},
		{"not JSON", `admin=` + a, "decode tokens file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens.json")
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := readTokensFile(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("readTokensFile() error = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), a) {
				t.Errorf("readTokensFile() error leaks a token: %v", err)
			}
		})
	}
}

func TestWriteTokensFile_RefusesMalformed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	err := writeTokensFile(path, wire.TokensFile{Admin: "x"})
	if err == nil || !strings.Contains(err.Error(), "admin token") {
		t.Fatalf("writeTokensFile() error = %v, want one about the admin token", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("writeTokensFile() created %s despite the error", path)
	}
}

func TestNewTokens_WellFormedAndDistinct(t *testing.T) {
	seen := make(map[string]bool)
	for range 10 {
		tf, err := newTokens()
		if err != nil {
			t.Fatalf("newTokens() error = %v", err)
		}
		if err := checkTokens(tf); err != nil {
			t.Fatalf("newTokens() = malformed tokens: %v", err)
		}
		for _, tok := range []string{tf.Admin, tf.Member, tf.Query} {
			if seen[tok] {
				t.Fatalf("newTokens() repeated a token")
			}
			seen[tok] = true
		}
	}
}
