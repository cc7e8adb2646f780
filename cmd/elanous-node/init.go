package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/wire"
)

// tokenBytes is the number of random bytes in a cluster token (64 hex characters).
const tokenBytes = 32

func newInitCmd() *cobra.Command {
	var (
		file, from       string
		force, ifMissing bool
	)
	cmd := &cobra.Command{
		Use:   "init [--data-dir DIR | --file PATH] [--force | --if-missing] [--from FILE]",
		Short: "Create the cluster tokens file (admin, member and query tokens)",
		Long: `Create the cluster tokens file: three random tokens, admin, member and query,
written to <data_dir>/control/tokens.json (or tokens.file from the config, or
--file) with mode 0600. Run it once, on one candidate, then copy the file to
the same path on every other candidate: all candidates must share it.

The tokens are never printed. An existing file is kept unless --force is given;
replacing it invalidates the tokens every client and candidate holds. With
--if-missing an existing file is kept and init succeeds, for automated
bring-up (deploy/compose.yaml runs it on every "up").

--from FILE installs the tokens of FILE (checked, whatever its mode) instead
of drawing new ones: the file is written 0600 and owned by the user running
init. Kubernetes mounts a Secret group-readable, which serve refuses; an init
container copies it with --from (deploy/kubernetes).`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := file
			if path == "" {
				cfg, err := loadCommandConfig(cmd)
				if err != nil {
					return err
				}
				path = cfg.TokensFile()
			}
			var tokens wire.TokensFile
			var err error
			if from != "" {
				tokens, err = decodeTokensFile(from)
			} else {
				tokens, err = newTokens()
			}
			if err != nil {
				return err
			}
			if err := saveTokensFile(path, tokens, force); err != nil {
				if errors.Is(err, fs.ErrExist) && ifMissing {
					fmt.Fprintf(cmd.OutOrStdout(), "Kept the existing tokens file %s.\n", path)
					return nil
				}
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("tokens file %s already exists; keep it, or pass --force to replace it "+
						"(every client and candidate must then get the new file)", path)
				}
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Wrote cluster tokens to %s (mode 0600).\n", path)
			if from != "" {
				return nil
			}
			fmt.Fprintf(out, "Copy this file to the same path on every other candidate, keeping mode 0600, e.g.\n")
			fmt.Fprintf(out, "  scp -p %s <candidate>:%s\n", path, path)
			fmt.Fprintf(out, "Use a token without printing it, e.g.\n")
			fmt.Fprintf(out, "  export ELANOUS_TOKEN=\"$(jq -r .admin %s)\"\n", path)
			return nil
		},
	}
	cmd.Flags().String("data-dir", "", "data directory; the file goes to <data-dir>/control/tokens.json (config key node.data_dir)")
	cmd.Flags().StringVar(&file, "file", "", "write the tokens file to this path instead")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing tokens file")
	cmd.Flags().BoolVar(&ifMissing, "if-missing", false, "keep an existing tokens file and succeed")
	cmd.Flags().StringVar(&from, "from", "", "install the tokens of this file instead of drawing new ones")
	cmd.MarkFlagsMutuallyExclusive("data-dir", "file")
	cmd.MarkFlagsMutuallyExclusive("force", "if-missing")
	return cmd
}

// newTokens draws a fresh set of cluster tokens, each 32 bytes from
// crypto/rand as 64 lowercase hex characters.
func newTokens() (wire.TokensFile, error) {
	var t wire.TokensFile
	for _, dst := range []*string{&t.Admin, &t.Member, &t.Query} {
		b := make([]byte, tokenBytes)
		if _, err := rand.Read(b); err != nil {
			return wire.TokensFile{}, fmt.Errorf("draw random token: %w", err)
		}
		*dst = hex.EncodeToString(b)
	}
	return t, nil
}

// writeTokensFile writes t to path atomically with mode 0600, creating its
// directory with mode 0700 and replacing any existing file.
func writeTokensFile(path string, t wire.TokensFile) error {
	return saveTokensFile(path, t, true)
}

// saveTokensFile writes t to path: a temporary file in the same directory
// (created exclusively with mode 0600, then synced) is renamed over path when
// replace is set, or linked to path otherwise, which fails with an error
// matching fs.ErrExist if path exists. The directory is synced afterwards.
func saveTokensFile(path string, t wire.TokensFile, replace bool) error {
	if err := checkTokens(t); err != nil {
		return fmt.Errorf("write tokens file %s: %w", path, err)
	}
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encode tokens: %w", err)
	}
	data = append(data, '\n')

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create tokens directory: %w", err)
	}
	// os.CreateTemp opens with O_EXCL and mode 0600.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temporary tokens file: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a rename or link this removes nothing or the extra name
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if replace {
		err = os.Rename(tmpName, path)
	} else {
		err = os.Link(tmpName, path)
	}
	if err != nil {
		return fmt.Errorf("install tokens file: %w", err)
	}
	return syncDir(dir)
}

// syncDir fsyncs dir so a rename or link in it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: the directory of a file the operator named
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// readTokensFile reads and checks the cluster tokens file at path. It refuses
// a file that group or others may access (any of mode 0o077), a file that is
// not regular, unknown fields, and tokens that are not 64 lowercase hex
// characters or are equal to each other. Errors never include a token.
func readTokensFile(path string) (wire.TokensFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.TokensFile{}, fmt.Errorf("open tokens file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return wire.TokensFile{}, fmt.Errorf("stat tokens file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return wire.TokensFile{}, fmt.Errorf("tokens file %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return wire.TokensFile{}, fmt.Errorf("tokens file %s has mode %04o, open to group or others; "+
			"restrict it with: chmod 600 %s", path, perm, path)
	}
	return decodeTokens(f, path)
}

// decodeTokensFile reads and checks the tokens file at path, whatever its
// mode (init --from).
func decodeTokensFile(path string) (wire.TokensFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.TokensFile{}, fmt.Errorf("open tokens file: %w", err)
	}
	defer f.Close()
	return decodeTokens(f, path)
}

// decodeTokens decodes a tokens file strictly (no unknown fields, no
// trailing data) and checks its tokens; path is for messages.
func decodeTokens(r io.Reader, path string) (wire.TokensFile, error) {
	var t wire.TokensFile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return wire.TokensFile{}, fmt.Errorf("decode tokens file %s: %w", path, err)
	}
	// Only the end of the file may follow (dec.More would let a stray '}' or ']' through).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return wire.TokensFile{}, fmt.Errorf("decode tokens file %s: trailing data after the JSON object", path)
	}
	if err := checkTokens(t); err != nil {
		return wire.TokensFile{}, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return t, nil
}

// checkTokens reports a token that is not 64 lowercase hex characters, or
// two scopes sharing one token (which would merge their rights).
func checkTokens(t wire.TokensFile) error {
	scopes := []struct{ name, token string }{{"admin", t.Admin}, {"member", t.Member}, {"query", t.Query}}
	var errs []error
	for _, s := range scopes {
		if !wire.ValidToken(s.token) {
			errs = append(errs, fmt.Errorf("%s token must be %d lowercase hex characters", s.name, 2*tokenBytes))
		}
	}
	for i := range scopes {
		for j := i + 1; j < len(scopes); j++ {
			if scopes[i].token != "" && scopes[i].token == scopes[j].token {
				errs = append(errs, fmt.Errorf("%s and %s tokens must differ", scopes[i].name, scopes[j].name))
			}
		}
	}
	return errors.Join(errs...)
}
