package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// snapshotTimeout bounds a snapshot save or restore; the server's budget
// for either is 5 minutes.
const snapshotTimeout = 5 * time.Minute

func newSnapshotCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "snapshot",
		Short: "Save, inspect and restore backups of the cluster's replicated state",
		Long: `A snapshot file is a backup of the whole replicated state: resources,
port leases, machine tokens (their hashes), the limits and the primary claim.
It is one JSON header line — index, term, generation, format level, counts,
the document's size and SHA-256 — followed by the snapshot document.

  snapshot save FILE      take a consistent backup from the leader (admin)
  snapshot inspect FILE   check a file offline and print what it holds
  snapshot restore FILE   replace the cluster's state with a file's (admin)

A restore keeps the cluster's own Raft configuration and candidate
directory, makes the current leader's claim the primary (the generation never
goes backwards), keeps every lease's id and fence, and rebases every TTL as a
new leader does: a record keeps the time it had left when the backup was
taken, plus the grace, from the moment of the restore.`,
	}, newSnapshotSaveCmd(), newSnapshotInspectCmd(), newSnapshotRestoreCmd())
}

func newSnapshotSaveCmd() *cobra.Command {
	return newClientCmd(clientCmd[snapshotInfo]{
		cmd: &cobra.Command{
			Use:   "save FILE",
			Short: "Save a consistent backup of the replicated state to FILE (admin)",
			Long: `Ask the leader for a snapshot (GET /v1/snapshot, admin scope) and write it to
FILE (mode 0600). The snapshot is a linearizable read: it holds every write
the cluster acknowledged before the command started. The file is written
beside FILE, checked (layout, size, SHA-256, every record), synced and only
then renamed to FILE, so FILE is either a whole, checked backup or untouched.`,
			Example: `  ELANOUS_TOKEN=<admin token> elanous-node snapshot save --config /etc/elanous/elanous.yaml backup-$(date +%F).snap`,
			Args:    cobra.ExactArgs(1),
		},
		jsonHelp: "print the file's figures as JSON",
		run: func(cmd *cobra.Command, args []string, flags *clientFlags) (snapshotInfo, error) {
			client, err := scopedClient(cmd, flags, member.ScopeAdmin)
			if err != nil {
				return snapshotInfo{}, err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), snapshotTimeout)
			defer cancel()
			start := time.Now()
			var body io.ReadCloser
			err = withRetry(ctx, client, func(ctx context.Context) (err error) {
				body, err = client.Snapshot(ctx)
				return err
			})
			if err != nil {
				return snapshotInfo{}, explain(err, member.ScopeAdmin)
			}
			defer body.Close()
			info, err := saveSnapshotFile(args[0], body)
			if err != nil {
				return snapshotInfo{}, err
			}
			info.TookMs = time.Since(start).Milliseconds()
			return info, nil
		},
		text: func(cmd *cobra.Command, args []string, info snapshotInfo) error {
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s in %s\n", args[0], time.Duration(info.TookMs)*time.Millisecond)
			return printSnapshotInfo(cmd.OutOrStdout(), info)
		},
	})
}

// snapshotInfo is what inspect (and save) print about a file.
type snapshotInfo struct {
	File   string              `json:"file"`
	Bytes  int64               `json:"bytes"`
	Header wire.SnapshotHeader `json:"header"`
	Counts wire.SnapshotCounts `json:"counts"`
	TookMs int64               `json:"tookMs,omitempty"`
}

// saveSnapshotFile writes body to a temporary file beside path, checks it
// whole, syncs it and renames it to path.
func saveSnapshotFile(path string, body io.Reader) (snapshotInfo, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.partial")
	if err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: %w", err)
	}
	if _, err := io.Copy(tmp, body); err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: receive the snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: %w", err)
	}
	info, err := inspectSnapshotFile(tmp.Name())
	if err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: the snapshot received does not check: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return snapshotInfo{}, fmt.Errorf("snapshot save: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename survives a crash
		d.Close()
	}
	info.File = path
	return info, nil
}

// inspectSnapshotFile reads and checks the snapshot file at path as a
// restore would (api.ReadSnapshotFile).
func inspectSnapshotFile(path string) (snapshotInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return snapshotInfo{}, err
	}
	h, b, err := api.ReadSnapshotFile(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return snapshotInfo{}, fmt.Errorf("%s is not a usable snapshot file: %s", path, ae.Message)
		}
		return snapshotInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	c := b.Counts()
	return snapshotInfo{File: path, Bytes: st.Size(), Header: h,
		Counts: wire.SnapshotCounts{Resources: c.Resources, Leases: c.Leases, Tokens: c.Tokens, Candidates: c.Candidates}}, nil
}

func printSnapshotInfo(w io.Writer, info snapshotInfo) error {
	h := info.Header
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s (%d bytes)\n", info.File, info.Bytes)
	fmt.Fprintf(tw, "index\t%d\n", h.Index)
	fmt.Fprintf(tw, "term\t%d\n", h.Term)
	fmt.Fprintf(tw, "generation\t%d (primary %s)\n", h.Generation, orDash(h.Holder))
	fmt.Fprintf(tw, "format\t%d\n", h.FormatLevel)
	fmt.Fprintf(tw, "counts\t%d resources, %d leases, %d tokens, %d candidates\n", info.Counts.Resources, info.Counts.Leases, info.Counts.Tokens, info.Counts.Candidates)
	fmt.Fprintf(tw, "cluster time\t%s\n", msTime(h.LastNow))
	fmt.Fprintf(tw, "taken at\t%s by version %s\n", orDash(h.TakenAt), orDash(h.Version))
	fmt.Fprintf(tw, "document\t%d bytes, sha256 %s (verified)\n", h.Size, h.SHA256)
	return tw.Flush()
}

func newSnapshotInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a snapshot file offline and print its index, term, generation, format, counts and size",
		Long: `Check a snapshot file without contacting the cluster — its layout, the
document's size and SHA-256, every record, and the header's figures against
the document's — and print what it holds. It exits non-zero, saying why, for a
file a restore would refuse (truncated, corrupt, not a snapshot file).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := inspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), info)
			}
			return printSnapshotInfo(cmd.OutOrStdout(), info)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the file's figures as JSON")
	return cmd
}

func newSnapshotRestoreCmd() *cobra.Command {
	return newClientCmd(clientCmd[wire.RestoreResult]{
		cmd: &cobra.Command{
			Use:   "restore FILE",
			Short: "Replace the cluster's replicated state with a snapshot file's (admin)",
			Long: `Replace the whole replicated state of the running cluster with the state in
FILE (PUT /v1/snapshot, admin scope). The file is checked here first, then by
the leader, which refuses a truncated, corrupt or foreign file with 400
invalid-snapshot and changes nothing.

The leader rebases the backup once — every TTL keeps what it had left when
the backup was taken plus the grace, from now on; the primary claim is the
current leader's at its term; leases keep their ids and fences; the Raft
configuration and candidate directory stay the cluster's — and installs it
through raft.Restore; every other server receives the same bytes. The command
returns once a quorum holds the restored state. Writes in flight at that
moment answer 503 outcome-unknown; everything written after the backup was
taken is gone.`,
			Example: `  ELANOUS_TOKEN=<admin token> elanous-node snapshot restore --config /etc/elanous/elanous.yaml backup-2025-01-31.snap`,
			Args:    cobra.ExactArgs(1),
		},
		jsonHelp: "print the result as JSON",
		run: func(cmd *cobra.Command, args []string, flags *clientFlags) (res wire.RestoreResult, err error) {
			info, err := inspectSnapshotFile(args[0])
			if err != nil {
				return res, err
			}
			client, err := scopedClient(cmd, flags, member.ScopeAdmin)
			if err != nil {
				return res, err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return res, err
			}
			defer f.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), snapshotTimeout)
			defer cancel()
			err = withRetry(ctx, client, func(ctx context.Context) error {
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return err
				}
				res, err = client.RestoreSnapshot(ctx, f, info.Bytes)
				return err
			})
			if err != nil {
				return res, explain(err, member.ScopeAdmin)
			}
			return res, nil
		},
		text: func(cmd *cobra.Command, args []string, res wire.RestoreResult) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(),
				"restored %s (index %d, generation %d: %d resources, %d leases, %d tokens) in %s\nthe cluster is at index %d, generation %d, primary %s, format %d\n",
				args[0], res.Backup.Index, res.Backup.Generation, res.Counts.Resources, res.Counts.Leases, res.Counts.Tokens,
				time.Duration(res.TookMs)*time.Millisecond, res.Index, res.Generation, res.Holder, res.FormatLevel)
			return err
		},
	})
}
