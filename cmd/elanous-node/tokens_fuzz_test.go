package main

import (
	"encoding/json"
	"github.com/elanous/elanous-node/wire"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadTokensFile feeds fuzzed bytes to readTokensFile as a 0600
// tokens.json. It never panics; a refusal names the file and repeats no
// token of it; an accepted file is one JSON object and nothing else (the
// decoding is strict), holds three distinct well-formed tokens, and written
// back by saveTokensFile it reads back the same.
func FuzzReadTokensFile(f *testing.F) {
	a, m, q := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("0123456789abcdef", 4)
	valid := `{"admin":"` + a + `","member":"` + m + `","query":"` + q + `"}`
	for _, seed := range []string{
		valid, valid + "\n", "  " + valid + "\r\n\t",
		`{"admin": "` + a + `", "member": "` + m + `", "query": "` + q + `"}`,
		`{"ADMIN":"` + a + `","Member":"` + m + `","query":"` + q + `"}`,
		`{"admin":"` + a + `","member":"` + a + `","query":"` + q + `"}`,
		`{"admin":"` + a + `","member":"` + m + `"}`,
		`{"admin":"` + a + `","member":"` + m + `","query":"` + q + `","extra":1}`,
		`{"admin":"` + strings.ToUpper(a) + `","member":"` + m + `","query":"` + q + `"}`,
		valid + valid, valid + `x`, `{"admin":null}`, `{"admin":1}`, `[]`, `null`, `{`, ``, a,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "tokens.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tf, err := readTokensFile(path)
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Fatalf("readTokensFile() error = %q, which does not name the file", msg)
			}
			// The tokens are the object's well-formed values; a key is
			// quoted like any unknown field, whatever it looks like.
			var values map[string]json.RawMessage
			_ = json.Unmarshal(data, &values)
			for _, raw := range values {
				var tok string
				if json.Unmarshal(raw, &tok) == nil && wire.ValidToken(tok) && strings.Contains(msg, tok) {
					t.Fatalf("readTokensFile() error = %q repeats a token of the file", msg)
				}
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("readTokensFile() accepted %q, which is not one JSON value", data)
		}
		if err := checkTokens(tf); err != nil || tf.Admin == "" || tf.Member == "" || tf.Query == "" {
			t.Fatalf("readTokensFile() = a file with a bad or missing token (%v)", err)
		}
		path2 := filepath.Join(t.TempDir(), "control", "tokens.json")
		if err := saveTokensFile(path2, tf, false); err != nil {
			t.Fatalf("saveTokensFile(readTokensFile()) error = %v", err)
		}
		tf2, err := readTokensFile(path2)
		if err != nil {
			t.Fatalf("readTokensFile(written back) error = %v", err)
		}
		if tf2 != tf {
			t.Fatalf("readTokensFile() differs once written back")
		}
	})
}
