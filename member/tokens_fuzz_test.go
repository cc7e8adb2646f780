package member

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/wire"
)

// Tokens of the fuzz seeds (64 lowercase hex characters).
var (
	fuzzTokenA = strings.Repeat("a", 63) + "1"
	fuzzTokenB = strings.Repeat("b", 63) + "2"
	fuzzTokenC = strings.Repeat("0123456789abcdef", 4)
)

// assertNoToken fails if msg repeats one of the well-formed tokens a file
// holds where a token belongs (see tokenFileTokens and joinFileTokens). A
// string elsewhere (a key, a url) is no token to the reader and may be
// quoted, whatever it looks like.
func assertNoToken(t *testing.T, msg string, tokens []string) {
	t.Helper()
	for _, tok := range tokens {
		if wire.ValidToken(tok) && strings.Contains(msg, tok) {
			t.Fatalf("the error %q repeats a token of the file", msg)
		}
	}
}

// jsonStrings returns the string values of raw, a JSON object.
func jsonStrings(raw []byte) []string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	var out []string
	for _, v := range m {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// tokenFileTokens are a token file's tokens: the whole file (a bare token)
// and the values of its object (scoped tokens).
func tokenFileTokens(data []byte) []string {
	return append(jsonStrings(data), strings.TrimSpace(string(data)))
}

// joinFileTokens are a join file's tokens: "token" and the values of
// "tokens".
func joinFileTokens(data []byte) []string {
	var top struct {
		Token  json.RawMessage `json:"token"`
		Tokens json.RawMessage `json:"tokens"`
	}
	_ = json.Unmarshal(data, &top)
	var tok string
	_ = json.Unmarshal(top.Token, &tok)
	return append(jsonStrings(top.Tokens), tok)
}

// writeSecret writes data to path with mode 0600, creating its directory.
func writeSecret(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadTokenFile feeds fuzzed bytes to ReadTokenFile as a 0600 file: it
// never panics; a refusal names the file and repeats no token (see
// assertNoToken); an accepted file holds a bare token or only well-formed
// tokens of the three scopes, and written back in its shape it reads back
// the same.
func FuzzReadTokenFile(f *testing.F) {
	for _, seed := range []string{
		fuzzTokenA, fuzzTokenA + "\n", " \t" + fuzzTokenA + "\r\n", strings.ToUpper(fuzzTokenA), fuzzTokenA[:63],
		`{"admin":"` + fuzzTokenA + `","member":"` + fuzzTokenB + `","query":"` + fuzzTokenC + `"}`,
		`{"member":"` + fuzzTokenB + `","query":""}`,
		`{"member":"` + fuzzTokenB + `","extra":"` + fuzzTokenA + `"}`,
		`{"Member":"` + fuzzTokenB + `"}`,
		`{"member":"` + fuzzTokenB + `","member":""}`,
		`{"member":null}`, `{"member":7}`, `{}`, `{`, `[]`, `""`, ``, "\x00", `{"member":"` + fuzzTokenB + `"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "token")
		writeSecret(t, path, data)
		tf, err := ReadTokenFile(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadTokenFile() error = %q, which does not name the file", err)
			}
			assertNoToken(t, err.Error(), tokenFileTokens(data))
			return
		}
		var again []byte
		switch {
		case tf.Bare != "" && tf.Tokens == nil:
			if !wire.ValidToken(tf.Bare) {
				t.Fatalf("ReadTokenFile() = bare %q, not a token", tf.Bare)
			}
			again = []byte(tf.Bare + "\n")
		case tf.Bare == "" && len(tf.Tokens) > 0:
			if err := tf.Tokens.validate(); err != nil {
				t.Fatalf("ReadTokenFile() = %v, which does not validate: %v", tf.Tokens, err)
			}
			again, err = json.Marshal(tf.Tokens)
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("ReadTokenFile() = %+v: want a bare token or scoped tokens", tf)
		}
		path2 := filepath.Join(t.TempDir(), "token")
		writeSecret(t, path2, again)
		tf2, err := ReadTokenFile(path2)
		if err != nil {
			t.Fatalf("ReadTokenFile(written back) error = %v\n%s", err, again)
		}
		if !reflect.DeepEqual(tf, tf2) {
			t.Fatalf("ReadTokenFile() = %+v, then %+v once written back", tf, tf2)
		}
	})
}

// FuzzReadJoinFile feeds fuzzed bytes to ReadJoinFile as a 0600
// control/join.json: it never panics and never answers (nil, nil) for a file
// that exists; a refusal names the file and repeats no token (see
// assertNoToken); an accepted file has an origin in normal form, a valid
// machine and token set, and WriteJoinFile then ReadJoinFile gives the same
// Join back, learned candidates included (a scoped join without any token reads, as primary.ts reads it,
// but is never written).
func FuzzReadJoinFile(f *testing.F) {
	ca, err := certs.NewCA(time.Unix(1_700_000_000, 0), 0)
	if err != nil {
		f.Fatal(err)
	}
	caJSON, _ := json.Marshal(string(ca.Cert))
	for _, seed := range []string{
		`{"url":"http://10.0.0.1:31413","tokens":{"admin":"` + fuzzTokenA + `","member":"` + fuzzTokenB + `","query":"` + fuzzTokenC + `"}}`,
		`{"url":"HTTP://Node-A.example:80/path?q#f","tokens":{"query":"` + fuzzTokenC + `"}}`,
		`{"url":"https://[::1]:31413","machine":"mbp","token":"` + fuzzTokenA + `","ca":` + string(caJSON) + `}`,
		`{"url":"http://10.0.0.1:31413","machine":"mbp","token":"` + fuzzTokenA + `","tokens":{"admin":"` + fuzzTokenB + `"}}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"member":"` + fuzzTokenB + `"},"candidates":[{"machine":"node-a","url":"HTTP://10.0.0.1:31413/"},{"machine":"node-b","url":"https://[::1]:1"}]}`,
		`{"url":"http://10.0.0.1:31413","machine":"mbp","token":"` + fuzzTokenA + `","candidates":[{"machine":"node-a","url":"http://a:1"},{"machine":"node-a","url":"http://b:1"}]}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"member":"` + fuzzTokenB + `"},"candidates":[]}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"member":"` + fuzzTokenB + `"},"candidates":{"machine":"node-a"}}`,
		`{"url":"http://10.0.0.1:31413","machine":"__proto__","token":"` + fuzzTokenA + `"}`,
		`{"url":"http://10.0.0.1:31413","token":"` + fuzzTokenA + `"}`,
		`{"url":"http://10.0.0.1:31413","tokens":{}}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"root":"` + fuzzTokenA + `"}}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"member":null}}`,
		`{"url":"http://10.0.0.1:31413","tokens":{"member":"` + fuzzTokenB + `"},"ca":"not a pem"}`,
		`{"url":"ftp://10.0.0.1","tokens":{"member":"` + fuzzTokenB + `"}}`,
		`{"url":" http://user:pw@10.0.0.1:31413 ","tokens":{"member":"` + fuzzTokenB + `"}}`,
		`{"url":null}`, `null`, `[]`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		writeSecret(t, JoinPath(root), data)
		j, err := ReadJoinFile(root)
		if err != nil {
			if !strings.Contains(err.Error(), JoinPath(root)) {
				t.Fatalf("ReadJoinFile() error = %q, which does not name the file", err)
			}
			assertNoToken(t, err.Error(), joinFileTokens(data))
			return
		}
		if j == nil {
			t.Fatalf("ReadJoinFile() = nil, nil for a file that exists")
		}
		if origin, err := wire.ParseOrigin(j.URL); err != nil || origin != j.URL {
			t.Fatalf("ReadJoinFile().URL = %q, not an origin in normal form (%q, %v)", j.URL, origin, err)
		}
		if err := j.Tokens.validate(); err != nil {
			t.Fatalf("ReadJoinFile().Tokens = %v (%v)", j.Tokens, err)
		}
		root2 := t.TempDir()
		if len(j.Tokens) == 0 {
			// A scoped join without tokens reads (as primary.ts reads it:
			// no credentials), but is never written.
			if err := WriteJoinFile(root2, *j); err == nil {
				t.Fatalf("WriteJoinFile(%+v) wrote a join file without tokens", j)
			}
			return
		}
		if j.Machine != "" && (!wire.ValidMachine(j.Machine) || len(j.Tokens) != 1 || j.Tokens[ScopeMember] == "") {
			t.Fatalf("ReadJoinFile() = machine %q with tokens %v", j.Machine, j.Tokens)
		}
		if err := WriteJoinFile(root2, *j); err != nil {
			t.Fatalf("WriteJoinFile(ReadJoinFile()) error = %v", err)
		}
		j2, err := ReadJoinFile(root2)
		if err != nil {
			written, _ := os.ReadFile(JoinPath(root2))
			t.Fatalf("ReadJoinFile(written back) error = %v\n%s", err, written)
		}
		sameCandidates := len(j.Candidates) == 0 && len(j2.Candidates) == 0 || reflect.DeepEqual(j.Candidates, j2.Candidates)
		if j2 == nil || j.URL != j2.URL || j.Machine != j2.Machine || !reflect.DeepEqual(j.Tokens, j2.Tokens) || !bytes.Equal(j.CA, j2.CA) || !sameCandidates {
			t.Fatalf("ReadJoinFile() = %+v, then %+v once written back", j, j2)
		}
	})
}
