package member

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeJoinRaw(t *testing.T, root, content string, mode os.FileMode) string {
	t.Helper()
	path := JoinPath(root)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadJoinFile_RefusesGroupOrWorldAccess(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		root := t.TempDir()
		path := writeJoinRaw(t, root, `{"url":"http://a.test","machine":"mbp","token":"`+tokenA+`"}`, mode)
		j, err := ReadJoinFile(root)
		if j != nil || !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("ReadJoinFile(mode %04o) = %v, %v; want ErrInsecureFile", mode, j, err)
		}
		msg := err.Error()
		for _, want := range []string{path, "chmod 600 " + path, "join file"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not contain %q", msg, want)
			}
		}
		if strings.Contains(msg, tokenA) {
			t.Errorf("error %q contains the token", msg)
		}
		var insecure *InsecureFileError
		if !errors.As(err, &insecure) || insecure.Mode != mode {
			t.Errorf("errors.As(*InsecureFileError) mode = %v, want %04o", insecure, mode)
		}
	}
}

func TestReadJoinFile_Shapes(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    *Join
		wantErr bool
	}{
		{name: "machine shape", content: `{"url":"http://A.test:80/","machine":"mbp","token":"` + tokenA + `"}`,
			want: &Join{URL: "http://a.test", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}}},
		{name: "scoped shape", content: `{"url":"http://a.test","tokens":{"query":"` + tokenA + `","member":"` + tokenB + `"}}`,
			want: &Join{URL: "http://a.test", Tokens: Tokens{ScopeQuery: tokenA, ScopeMember: tokenB}}},
		{name: "unknown top-level keys are ignored", content: `{"url":"http://a.test","tokens":{},"note":1}`,
			want: &Join{URL: "http://a.test", Tokens: Tokens{}}},
		{name: "not an object", content: `[1]`, wantErr: true},
		{name: "null", content: `null`, wantErr: true},
		{name: "url missing", content: `{"tokens":{}}`, wantErr: true},
		{name: "url with a path", content: `{"url":"http://a.test/x","tokens":{}}`, wantErr: true},
		{name: "tokens missing", content: `{"url":"http://a.test"}`, wantErr: true},
		{name: "unknown scope", content: `{"url":"http://a.test","tokens":{"root":"` + tokenA + `"}}`, wantErr: true},
		{name: "short token", content: `{"url":"http://a.test","tokens":{"member":"abc"}}`, wantErr: true},
		{name: "machine without token", content: `{"url":"http://a.test","machine":"mbp"}`, wantErr: true},
		{name: "token null", content: `{"url":"http://a.test","machine":"mbp","token":null}`, wantErr: true},
		{name: "machine __proto__", content: `{"url":"http://a.test","machine":"__proto__","token":"` + tokenA + `"}`, wantErr: true},
		{name: "machine with a slash", content: `{"url":"http://a.test","machine":"a/b","token":"` + tokenA + `"}`, wantErr: true},
		{name: "not JSON", content: `url=http://a.test`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeJoinRaw(t, root, tt.content, 0o600)
			got, err := ReadJoinFile(root)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidJoinFile) {
					t.Errorf("ReadJoinFile() = %v, %v; want ErrInvalidJoinFile", got, err)
				}
				if err != nil && strings.Contains(err.Error(), tokenA) {
					t.Errorf("error %q contains the token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadJoinFile() error = %v", err)
			}
			if got.URL != tt.want.URL || got.Machine != tt.want.Machine || !mapsEqual(got.Tokens, tt.want.Tokens) {
				t.Errorf("ReadJoinFile() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func mapsEqual(a, b Tokens) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestReadJoinFile_Missing(t *testing.T) {
	j, err := ReadJoinFile(t.TempDir())
	if j != nil || err != nil {
		t.Errorf("ReadJoinFile(no file) = %v, %v; want nil, nil", j, err)
	}
}

func TestWriteJoinFile(t *testing.T) {
	t.Run("machine join is 0600 and round-trips", func(t *testing.T) {
		root := t.TempDir()
		in := Join{URL: "http://A.test:80", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA}}
		if err := WriteJoinFile(root, in); err != nil {
			t.Fatalf("WriteJoinFile() error = %v", err)
		}
		assertJoinFileMode(t, root)
		raw, _ := os.ReadFile(JoinPath(root))
		if want := `{"url":"http://a.test","machine":"mbp","token":"` + tokenA + `"}`; string(raw) != want {
			t.Errorf("join.json = %s, want %s", raw, want)
		}
		got, err := ReadJoinFile(root)
		if err != nil || got.URL != "http://a.test" || got.Machine != "mbp" || got.Tokens[ScopeMember] != tokenA {
			t.Errorf("ReadJoinFile() = %+v, %v", got, err)
		}
	})
	t.Run("scopes are never widened", func(t *testing.T) {
		root := t.TempDir()
		if err := WriteJoinFile(root, Join{URL: "http://a.test", Tokens: Tokens{ScopeQuery: tokenB}}); err != nil {
			t.Fatalf("WriteJoinFile() error = %v", err)
		}
		raw, _ := os.ReadFile(JoinPath(root))
		var loose struct {
			Tokens map[string]string `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &loose); err != nil {
			t.Fatal(err)
		}
		var scopes []string
		for k := range loose.Tokens {
			scopes = append(scopes, k)
		}
		if !slices.Equal(scopes, []string{"query"}) {
			t.Errorf("written scopes = %v, want only [query]", scopes)
		}
		assertJoinFileMode(t, root)
	})
	t.Run("replaces a 0644 file with a 0600 one", func(t *testing.T) {
		root := t.TempDir()
		writeJoinRaw(t, root, `{}`, 0o644)
		if err := WriteJoinFile(root, Join{URL: "http://a.test", Tokens: Tokens{ScopeMember: tokenA}}); err != nil {
			t.Fatalf("WriteJoinFile() error = %v", err)
		}
		assertJoinFileMode(t, root)
	})
	t.Run("refusals", func(t *testing.T) {
		bad := []Join{
			{URL: "http://a.test/x", Tokens: Tokens{ScopeMember: tokenA}},
			{URL: "http://a.test", Tokens: Tokens{ScopeMember: "short"}},
			{URL: "http://a.test", Tokens: Tokens{"root": tokenA}},
			{URL: "http://a.test"},
			{URL: "http://a.test", Machine: "mbp", Tokens: Tokens{ScopeAdmin: tokenA}},
			{URL: "http://a.test", Machine: "mbp", Tokens: Tokens{ScopeMember: tokenA, ScopeQuery: tokenB}},
			{URL: "http://a.test", Machine: "constructor", Tokens: Tokens{ScopeMember: tokenA}},
		}
		for _, j := range bad {
			root := t.TempDir()
			if err := WriteJoinFile(root, j); err == nil {
				t.Errorf("WriteJoinFile(%+v) error = nil, want an error", j)
			} else if strings.Contains(err.Error(), tokenA) {
				t.Errorf("error %q contains the token", err)
			}
			if _, err := os.Stat(JoinPath(root)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("WriteJoinFile(%+v) left a file behind", j)
			}
		}
	})
}

// assertJoinFileMode checks the file is 0600, the directory 0700, and no
// temporary file remains.
func assertJoinFileMode(t *testing.T, root string) {
	t.Helper()
	info, err := os.Stat(JoinPath(root))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("join.json mode = %04o, want 0600", info.Mode().Perm())
	}
	entries, err := os.ReadDir(filepath.Dir(JoinPath(root)))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "join.json" {
			t.Errorf("leftover file %s in control/", e.Name())
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	t.Run("bare token", func(t *testing.T) {
		f, err := ReadTokenFile(write("bare", tokenA+"\n", 0o600))
		if err != nil || f.Bare != tokenA {
			t.Fatalf("ReadTokenFile() = %+v, %v", f, err)
		}
		for _, s := range []Scope{ScopeAdmin, ScopeMember, ScopeQuery} {
			if got, ok := f.For(s); !ok || got != tokenA {
				t.Errorf("For(%s) = %q, %v; want the bare token", s, got, ok)
			}
		}
	})
	t.Run("tokens.json", func(t *testing.T) {
		f, err := ReadTokenFile(write("tokens.json", `{"admin":"`+tokenA+`","member":"`+tokenB+`","query":""}`, 0o600))
		if err != nil {
			t.Fatalf("ReadTokenFile() error = %v", err)
		}
		checks := []struct {
			scope Scope
			want  string
		}{{ScopeAdmin, tokenA}, {ScopeMember, tokenB}, {ScopeQuery, tokenB}}
		for _, c := range checks {
			if got, _ := f.For(c.scope); got != c.want {
				t.Errorf("For(%s) = %.8q, want %.8q", c.scope, got, c.want)
			}
		}
	})
	t.Run("group-readable is refused", func(t *testing.T) {
		p := write("loose", tokenA, 0o640)
		_, err := ReadTokenFile(p)
		if !errors.Is(err, ErrInsecureFile) || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("ReadTokenFile() error = %v, want ErrInsecureFile naming chmod 600", err)
		}
	})
	for name, content := range map[string]string{
		"garbage": "hello", "short": "abc123", "bad scope": `{"root":"` + tokenA + `"}`,
		"bad value": `{"admin":"xyz"}`, "empty object": `{}`, "number": `{"admin":1}`,
	} {
		t.Run(name+" is refused", func(t *testing.T) {
			_, err := ReadTokenFile(write(strings.ReplaceAll(name, " ", "-"), content, 0o600))
			if !errors.Is(err, ErrInvalidTokens) {
				t.Errorf("ReadTokenFile(%q) error = %v, want ErrInvalidTokens", content, err)
			}
		})
	}
}
