package member

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/elanous/elanous-node/wire"
)

// Scope is the scope of a cluster token. Scopes nest: admin ⊇ member ⊇ query.
type Scope string

// The three cluster token scopes.
const (
	ScopeAdmin  Scope = "admin"
	ScopeMember Scope = "member"
	ScopeQuery  Scope = "query"
)

// Tokens maps scopes to bearer tokens (64 lowercase hex characters each).
type Tokens map[Scope]string

// JoinFilePath is the join file's path relative to a member's root directory.
const JoinFilePath = "control/join.json"

// maxSecretFile bounds what is read from a join or token file.
const maxSecretFile = 64 << 10

// validate checks a scoped token set the way primary.ts scopedTokens does:
// only the three scopes as keys, every value a well-formed token.
func (t Tokens) validate() error {
	for scope, token := range t {
		switch scope {
		case ScopeAdmin, ScopeMember, ScopeQuery:
		default:
			return fmt.Errorf("%w: unknown scope %q", ErrInvalidTokens, string(scope))
		}
		if !wire.ValidToken(token) {
			return fmt.Errorf("%w: the %s token is not 64 lowercase hex characters", ErrInvalidTokens, scope)
		}
	}
	return nil
}

// clone returns a copy of t (nil for an empty set).
func (t Tokens) clone() Tokens {
	if len(t) == 0 {
		return nil
	}
	out := make(Tokens, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}

// For returns the token to use for scope: the token of that exact scope, or
// else the narrowest wider one that is present (query falls back to member,
// then admin; member falls back to admin). It is meant for a token file an
// operator hands to a command, not for the join file, whose rules
// (Resolver) are narrower.
func (t Tokens) For(scope Scope) (string, bool) {
	order := []Scope{scope}
	switch scope {
	case ScopeQuery:
		order = append(order, ScopeMember, ScopeAdmin)
	case ScopeMember:
		order = append(order, ScopeAdmin)
	}
	for _, s := range order {
		if tok, ok := t[s]; ok && tok != "" {
			return tok, true
		}
	}
	return "", false
}

// InsecureFileError reports a secret file that group or others may access.
// It matches ErrInsecureFile with errors.Is.
type InsecureFileError struct {
	// Kind names the file for the message, e.g. "join file".
	Kind string
	// Path is the file's path.
	Path string
	// Mode is the permission bits found.
	Mode fs.FileMode
}

// Error says what is wrong and how to fix it.
func (e *InsecureFileError) Error() string {
	return fmt.Sprintf("%s %s has mode %04o and is readable by group or others; it must be 0600 (run: chmod 600 %s)",
		e.Kind, e.Path, uint32(e.Mode.Perm()), e.Path)
}

// Unwrap returns ErrInsecureFile.
func (e *InsecureFileError) Unwrap() error { return ErrInsecureFile }

// readSecretFile reads a file that holds credentials, refusing one that is not
// a regular file or that group or others may access. The mode is checked on
// the opened file, so a swap between check and read is not possible.
func readSecretFile(kind, path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names the secret file; its mode is checked below
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s %s: %w", kind, path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s is not a regular file", kind, path)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, &InsecureFileError{Kind: kind, Path: path, Mode: info.Mode().Perm()}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", kind, path, err)
	}
	if len(data) > maxSecretFile {
		return nil, fmt.Errorf("%s %s is larger than %d bytes", kind, path, maxSecretFile)
	}
	return data, nil
}

// Join is the content of control/join.json: the address a member joined and
// the credentials it joined with. A machine join (Machine set) carries a
// single machine token, as Tokens[ScopeMember]; a scoped join carries any of
// the three cluster tokens.
type Join struct {
	// URL is the origin the credentials were issued for.
	URL string
	// Machine is the member machine a machine token is limited to; empty for
	// a scoped join.
	Machine string
	// Tokens are the joined credentials.
	Tokens Tokens
	// CA is the PEM of the cluster CA when the cluster runs TLS (the join
	// file's "ca"); nil for a plaintext cluster.
	CA []byte
	// Candidates are the candidates the member learned from the cluster
	// (GET /v1/cluster/peers, asked with these credentials), written to the
	// join file as "candidates" (the TypeScript client ignores it). The
	// tokens may go to their URLs as well as to URL; Tokens of the entries
	// are unused.
	Candidates []Candidate
}

// JoinPath returns the join file's path under root.
func JoinPath(root string) string { return filepath.Join(root, filepath.FromSlash(JoinFilePath)) }

// ReadJoinFile reads root/control/join.json as primary.ts readPrimaryJoin
// does: both the scoped shape {url, tokens} and the machine shape
// {url, machine, token}, with the URL normalized to its origin, and the
// cluster CA from "ca" when present (a PEM that does not parse is damage). A missing
// file returns (nil, nil). Unlike the TypeScript client, which silently
// ignores such files, a file that group or others may access is refused with
// an *InsecureFileError, and a damaged file is an error wrapping
// ErrInvalidJoinFile, so a command can say why it has no credentials.
func ReadJoinFile(root string) (*Join, error) {
	path := JoinPath(root)
	data, err := readSecretFile("join file", path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j, err := parseJoin(data)
	if err != nil {
		return nil, fmt.Errorf("join file %s: %w", path, err)
	}
	return j, nil
}

// parseJoin decodes a join file's bytes with readPrimaryJoin's rules.
func parseJoin(data []byte) (*Join, error) {
	var row map[string]json.RawMessage
	if err := json.Unmarshal(data, &row); err != nil || row == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidJoinFile)
	}
	rawURL, ok := jsonString(row["url"])
	if !ok {
		return nil, fmt.Errorf("%w: url is not a string", ErrInvalidJoinFile)
	}
	origin, err := wire.ParseOrigin(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJoinFile, err)
	}
	var ca []byte
	if raw, present := row["ca"]; present {
		pemText, ok := jsonString(raw)
		if !ok {
			return nil, fmt.Errorf("%w: ca is not a string", ErrInvalidJoinFile)
		}
		if _, err := ParseCA([]byte(pemText)); err != nil {
			return nil, fmt.Errorf("%w: ca: %w", ErrInvalidJoinFile, err)
		}
		ca = []byte(pemText)
	}
	candidates, err := parseJoinCandidates(row["candidates"])
	if err != nil {
		return nil, err
	}
	_, hasMachine := row["machine"]
	_, hasToken := row["token"]
	if hasMachine || hasToken {
		machine, okM := jsonString(row["machine"])
		token, okT := jsonString(row["token"])
		if !okM || !wire.ValidMachine(machine) {
			return nil, fmt.Errorf("%w: invalid machine", ErrInvalidJoinFile)
		}
		if !okT || !wire.ValidToken(token) {
			return nil, fmt.Errorf("%w: the token is not 64 lowercase hex characters", ErrInvalidJoinFile)
		}
		return &Join{URL: origin, Machine: machine, Tokens: Tokens{ScopeMember: token}, CA: ca, Candidates: candidates}, nil
	}
	tokens, err := decodeScopedTokens(row["tokens"])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJoinFile, err)
	}
	return &Join{URL: origin, Tokens: tokens, CA: ca, Candidates: candidates}, nil
}

// parseJoinCandidates decodes the optional "candidates" of a join file: an
// array of {machine, url} with candidate names, http(s) origins and no
// name twice. Absent (or null) is an empty list.
func parseJoinCandidates(raw json.RawMessage) ([]Candidate, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []wire.JoinCandidate
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%w: candidates is not an array of {machine, url}", ErrInvalidJoinFile)
	}
	out, err := checkJoinCandidates(list)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJoinFile, err)
	}
	return out, nil
}

// checkJoinCandidates validates learned candidates and normalizes their URLs.
// Every entry names its machine.
func checkJoinCandidates(list []wire.JoinCandidate) ([]Candidate, error) {
	out := make([]Candidate, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, c := range list {
		origin, err := checkCandidate(seen, c.Machine, c.URL, false)
		if err != nil {
			return nil, err
		}
		out = append(out, Candidate{Machine: c.Machine, URL: origin})
	}
	return out, nil
}

// checkCandidate is the check every candidate list makes of one entry, the
// same for a configured list, a join file's and one learned from the
// cluster: a candidate name (ErrInvalidCandidate) that seen does not hold
// yet (ErrDuplicateCandidate), which it then records, and a URL that is an
// http(s) origin (ErrInvalidURL), returned normalized. An entry without a
// name is refused unless unnamedOK; it is then not compared with the others.
func checkCandidate(seen map[string]bool, machine, rawURL string, unnamedOK bool) (string, error) {
	if machine != "" || !unnamedOK {
		if !wire.ValidCandidate(machine) {
			return "", fmt.Errorf("%w %q", ErrInvalidCandidate, machine)
		}
		if seen[machine] {
			return "", fmt.Errorf("%w %q", ErrDuplicateCandidate, machine)
		}
		seen[machine] = true
	}
	origin, err := wire.ParseOrigin(rawURL)
	if err != nil {
		return "", fmt.Errorf("candidate %q: %w", machine, err)
	}
	return origin, nil
}

// joinDocument is the join file as written: the TypeScript shape plus the
// learned candidates.
type joinDocument struct {
	wire.JoinFile
	Candidates []wire.JoinCandidate `json:"candidates,omitempty"`
}

// decodeScopedTokens decodes a JSON object of scope → token, requiring every
// value to be a string (a null or a number is refused, as in scopedTokens).
func decodeScopedTokens(raw json.RawMessage) (Tokens, error) {
	var row map[string]json.RawMessage
	if err := json.Unmarshal(raw, &row); err != nil || row == nil {
		return nil, fmt.Errorf("%w: tokens is not a JSON object", ErrInvalidTokens)
	}
	tokens := make(Tokens, len(row))
	for key, value := range row {
		tok, ok := jsonString(value)
		if !ok {
			return nil, fmt.Errorf("%w: the %s token is not a string", ErrInvalidTokens, key)
		}
		tokens[Scope(key)] = tok
	}
	if err := tokens.validate(); err != nil {
		return nil, err
	}
	return tokens, nil
}

// jsonString decodes raw only when it is a JSON string (not null, not absent).
func jsonString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// WriteJoinFile writes root/control/join.json as primary.ts writePrimaryJoin
// does: only the credentials supplied are written (scopes are never added or
// widened), the URL is normalized to its origin, and the file is replaced
// atomically — a temporary file created exclusively with mode 0600 in the
// same directory, synced, renamed over the target and chmod-ed to 0600. The
// control directory is created with mode 0700 if missing.
//
// A machine join (j.Machine set) must carry exactly one token, the member
// one, and is written as {url, machine, token}; otherwise j.Tokens must hold
// at least one scoped token and is written as {url, tokens}. A CA (PEM) is
// written as "ca", which the TypeScript client ignores. Learned
// candidates (j.Candidates) are written as "candidates".
func WriteJoinFile(root string, j Join) error {
	origin, err := wire.ParseOrigin(j.URL)
	if err != nil {
		return fmt.Errorf("write join file: %w", err)
	}
	if err := j.Tokens.validate(); err != nil {
		return fmt.Errorf("write join file: %w", err)
	}
	value := wire.JoinFile{URL: origin}
	if j.CA != nil {
		if _, err := ParseCA(j.CA); err != nil {
			return fmt.Errorf("write join file: %w", err)
		}
		value.CA = string(j.CA)
	}
	if j.Machine != "" {
		if !wire.ValidMachine(j.Machine) {
			return fmt.Errorf("write join file: invalid machine %q", j.Machine)
		}
		tok, ok := j.Tokens[ScopeMember]
		if !ok || len(j.Tokens) != 1 {
			return fmt.Errorf("write join file: %w: a machine join carries exactly one member token", ErrInvalidTokens)
		}
		value.Machine, value.Token = j.Machine, tok
	} else {
		if len(j.Tokens) == 0 {
			return fmt.Errorf("write join file: %w: no tokens", ErrInvalidTokens)
		}
		value.Tokens = make(map[string]string, len(j.Tokens))
		for scope, tok := range j.Tokens {
			value.Tokens[string(scope)] = tok
		}
	}
	doc := joinDocument{JoinFile: value}
	var given []wire.JoinCandidate
	for _, c := range j.Candidates {
		given = append(given, wire.JoinCandidate{Machine: c.Machine, URL: c.URL})
	}
	checked, err := checkJoinCandidates(given)
	if err != nil {
		return fmt.Errorf("write join file: %w", err)
	}
	for _, c := range checked {
		doc.Candidates = append(doc.Candidates, wire.JoinCandidate{Machine: c.Machine, URL: c.URL})
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode join file: %w", err)
	}
	if err := writeFileAtomic(JoinPath(root), data); err != nil {
		return fmt.Errorf("write join file: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data through an exclusive 0600 temporary
// file in the same directory, so a reader sees the old file or the new one.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return err
	}
	temp := fmt.Sprintf("%s.%s.tmp", path, hex.EncodeToString(suffix[:]))
	defer func() {
		if rmErr := os.Remove(temp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = rmErr
		}
	}()
	f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: beside the join file the operator named
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(temp, path); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil { //nolint:gosec // G304: the join file's directory
		_ = d.Sync() // best effort: make the rename durable
		d.Close()
	}
	return nil
}

// TokenFile is what an operator hands to a command with --token-file: a
// bare token or a set of scoped tokens.
type TokenFile struct {
	// Bare is the token of a file holding just one token (such as a machine
	// token); empty for a tokens.json.
	Bare string
	// Tokens are the scoped tokens of a tokens.json; nil for a bare token.
	Tokens Tokens
}

// For returns the token to send for scope: the bare token, or else
// Tokens.For(scope).
func (f TokenFile) For(scope Scope) (string, bool) {
	if f.Bare != "" {
		return f.Bare, true
	}
	return f.Tokens.For(scope)
}

// ReadTokenFile reads credentials an operator hands to a command: either a
// bare token or a tokens.json object with any of the keys admin, member and
// query (an empty value counts as absent). The file must not be accessible by
// group or others (an *InsecureFileError otherwise). No token is ever part of
// an error message.
func ReadTokenFile(path string) (TokenFile, error) {
	data, err := readSecretFile("token file", path)
	if err != nil {
		return TokenFile{}, err
	}
	text := strings.TrimSpace(string(data))
	if wire.ValidToken(text) {
		return TokenFile{Bare: text}, nil
	}
	if !strings.HasPrefix(text, "{") {
		return TokenFile{}, fmt.Errorf("token file %s: %w: want a bare token or a JSON object of scoped tokens", path, ErrInvalidTokens)
	}
	var row map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &row); err != nil {
		return TokenFile{}, fmt.Errorf("token file %s: %w: not valid JSON", path, ErrInvalidTokens)
	}
	tokens := make(Tokens, len(row))
	for key, raw := range row {
		tok, ok := jsonString(raw)
		if !ok {
			return TokenFile{}, fmt.Errorf("token file %s: %w: %s is not a string", path, ErrInvalidTokens, key)
		}
		if tok != "" {
			tokens[Scope(key)] = tok
		}
	}
	if err := tokens.validate(); err != nil {
		return TokenFile{}, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(tokens) == 0 {
		return TokenFile{}, fmt.Errorf("token file %s: %w: no tokens", path, ErrInvalidTokens)
	}
	return TokenFile{Tokens: tokens}, nil
}
