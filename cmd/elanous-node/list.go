package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
)

// listCommand is every "<noun> list" command: one read of scope that returns
// a []T, printed as a JSON array with --json (never null) or as a table of
// header and one row per item. The read is consistent unless --stale (see
// listReadHelp); a failed read is "list <what>: <error>" with explain's hint.
type listCommand[T any] struct {
	cmd    *cobra.Command // Use, Short, Long and Example; newList adds the rest
	scope  member.Scope
	what   string
	fetch  func(ctx context.Context, c *member.Client, consistent bool) ([]T, error)
	header string
	row    func(w io.Writer, item T)
}

// newList completes l.cmd: no arguments, the client flags, --json and --stale.
func newList[T any](l listCommand[T]) *cobra.Command {
	var (
		flags         clientFlags
		asJSON, stale bool
	)
	cmd := l.cmd
	cmd.Args = cobra.NoArgs
	cmd.DisableFlagsInUseLine = true
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		list, err := runCall(cmd, &flags, l.scope, "list "+l.what, func(ctx context.Context, c *member.Client) ([]T, error) {
			return l.fetch(ctx, c, !stale)
		})
		if err != nil {
			return err
		}
		if asJSON {
			if list == nil {
				list = []T{}
			}
			return writeJSON(cmd.OutOrStdout(), list)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, l.header)
		for _, item := range list {
			l.row(tw, item)
		}
		return tw.Flush()
	}
	flags.bind(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	bindStale(cmd, &stale)
	return cmd
}
