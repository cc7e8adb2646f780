package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Candidate is one entry of cluster.candidates.
type Candidate struct{ Machine, URL, Raft string }

// TLSFiles are a node's tls.* files.
type TLSFiles struct{ CA, Cert, Key string }

// NodeConfig is what a candidate's config file says (docs/configuration.md
// names the keys). Zero timeouts are left to the defaults.
type NodeConfig struct {
	ID, DataDir string
	// URL is http.advertise; http.addr is its host:port.
	URL string
	// Raft is raft.addr and raft.advertise.
	Raft                             string
	Candidates                       []Candidate
	TokensFile                       string
	Heartbeat, Election, LeaderLease time.Duration
	TLS                              *TLSFiles // nil: no tls section
}

// Doc is the config document; callers may add or change keys before
// WriteConfig.
func (n NodeConfig) Doc() map[string]any {
	var cands []map[string]any
	for _, c := range n.Candidates {
		cands = append(cands, map[string]any{"machine": c.Machine, "url": c.URL, "raft": c.Raft})
	}
	host := n.URL
	if u, err := url.Parse(n.URL); err == nil && u.Host != "" {
		host = u.Host
	}
	raft := map[string]any{"addr": n.Raft, "advertise": n.Raft}
	for key, d := range map[string]time.Duration{"heartbeat_timeout": n.Heartbeat, "election_timeout": n.Election,
		"leader_lease_timeout": n.LeaderLease} {
		if d != 0 {
			raft[key] = d.String()
		}
	}
	doc := map[string]any{
		"node":    map[string]any{"id": n.ID, "data_dir": n.DataDir},
		"http":    map[string]any{"addr": host, "advertise": n.URL},
		"raft":    raft,
		"cluster": map[string]any{"bootstrap": true, "candidates": cands},
		"tokens":  map[string]any{"file": n.TokensFile},
	}
	if n.TLS != nil {
		doc["tls"] = map[string]any{"ca_file": n.TLS.CA, "cert_file": n.TLS.Cert, "key_file": n.TLS.Key}
	}
	return doc
}

// WriteConfig writes doc to path (mode 0600) as JSON, which is YAML: a
// flow-style document the config loader reads as any other.
func WriteConfig(path string, doc map[string]any) error {
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// InitTokens makes the cluster tokens file at files[0] with `bin init
// --file` (env its environment), copies it with mode 0600 to the other
// files, creating their directories, and returns its tokens.
func InitTokens(ctx context.Context, bin string, env []string, files ...string) (wire.TokensFile, error) {
	var t wire.TokensFile
	if len(files) == 0 {
		return t, fmt.Errorf("InitTokens: no file")
	}
	cmd := exec.CommandContext(ctx, bin, "init", "--file", files[0])
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return t, fmt.Errorf("elanous-node init --file %s: %w\n%s", files[0], err, out)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("tokens file written by init is not JSON: %w", err)
	}
	for _, f := range files[1:] {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return t, err
		}
		if err := os.WriteFile(f, raw, 0o600); err != nil {
			return t, err
		}
	}
	return t, nil
}
