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
	// cmd states Short and Example, and Use and Long where they are not
	// listUse and Short's sentence followed by listReadHelp; newList adds
	// the rest.
	cmd   *cobra.Command
	scope member.Scope
	what  string
	// fetch is the read, a method expression such as
	// (*member.Client).ListPeers.
	fetch  func(c *member.Client, ctx context.Context, o member.ReadOptions) ([]T, error)
	header string
	row    func(w io.Writer, item T)
}

// listUse is the Use of a list command with no flags of its own.
const listUse = "list [--json] [--stale]"

// newList completes l.cmd: no arguments, the client flags, --json and --stale.
func newList[T any](l listCommand[T]) *cobra.Command {
	var stale bool
	if l.cmd.Use == "" {
		l.cmd.Use = listUse
	}
	if l.cmd.Long == "" {
		l.cmd.Long = l.cmd.Short + ".\n\n" + listReadHelp
	}
	l.cmd.Args = cobra.NoArgs
	l.cmd.DisableFlagsInUseLine = true
	cmd := newClientCmd(clientCmd[[]T]{
		cmd:      l.cmd,
		jsonHelp: "print a JSON array",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) ([]T, error) {
			list, err := runCall(cmd, flags, l.scope, "list "+l.what, func(ctx context.Context, c *member.Client) ([]T, error) {
				return l.fetch(c, ctx, member.ReadOptions{Consistent: !stale})
			})
			if list == nil {
				list = []T{}
			}
			return list, err
		},
		text: func(cmd *cobra.Command, _ []string, list []T) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, l.header)
			for _, item := range list {
				l.row(tw, item)
			}
			return tw.Flush()
		},
	})
	bindStale(cmd, &stale)
	return cmd
}
