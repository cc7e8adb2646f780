package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Issue, revoke or list member machine tokens",
		Long: `Manage machine tokens: member-scope credentials limited to one machine's
resources and leases. The cluster keeps only their SHA-256; a token is shown
once, when issued. These commands need the admin token (ELANOUS_TOKEN or
--token-file).`,
		Example: `  elanous-node token issue --machine mbp > mbp.token && chmod 600 mbp.token
  elanous-node token list
  elanous-node token revoke --machine mbp`,
	}
	cmd.AddCommand(newTokenIssueCmd(), newTokenRevokeCmd(), newTokenListCmd())
	return cmd
}

func newTokenIssueCmd() *cobra.Command {
	var (
		flags   clientFlags
		machine string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "issue --machine M [--json]",
		Short: "Issue a machine token (replacing the machine's previous one) and print it once",
		Long: `Issue a token for one machine and print it on stdout — the only time it is
shown. Issuing again replaces the machine's previous token. Give the token to
the machine in a 0600 file and run "elanous-node join" there.`,
		Example: `  elanous-node token issue --machine mbp > mbp.token && chmod 600 mbp.token
  elanous-node token issue --machine mbp --json`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !wire.ValidMachine(machine) {
				return fmt.Errorf("--machine %q is not a valid machine name", machine)
			}
			issued, err := runCall(cmd, &flags, member.ScopeAdmin, "issue token for "+machine, func(ctx context.Context, c *member.Client) (wire.IssuedToken, error) {
				return c.IssueMemberToken(ctx, machine)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), issued)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "issued a token for %s at %s; it is shown only this once\n", issued.Machine, issued.IssuedAt)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), issued.Token)
			return err
		},
	}
	flags.bind(cmd)
	cmd.Flags().StringVar(&machine, "machine", "", "machine the token is limited to (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {machine, token, issuedAt} as JSON")
	_ = cmd.MarkFlagRequired("machine")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var (
		flags   clientFlags
		machine string
	)
	cmd := &cobra.Command{
		Use:                   "revoke --machine M",
		Short:                 "Revoke a machine's token",
		Example:               `  elanous-node token revoke --machine mbp`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := runCall(cmd, &flags, member.ScopeAdmin, "revoke token of "+machine, func(ctx context.Context, c *member.Client) (struct{}, error) {
				return struct{}{}, c.RevokeMemberToken(ctx, machine)
			})
			if member.IsNotFound(err) {
				return fmt.Errorf("revoke token of %s: the machine has no token", machine)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked the token of %s\n", machine)
			return err
		},
	}
	flags.bind(cmd)
	cmd.Flags().StringVar(&machine, "machine", "", "machine whose token to revoke (required)")
	_ = cmd.MarkFlagRequired("machine")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	return newList(listCommand[wire.TokenInfo]{
		cmd: &cobra.Command{
			Use:   "list [--json] [--stale]",
			Short: "List the machines that hold a token (never the tokens)",
			Long:  "List the machines that hold a token (never the tokens).\n\n" + listReadHelp,
			Example: `  elanous-node token list --json
  elanous-node token list --stale`,
		},
		scope: member.ScopeAdmin,
		what:  "tokens",
		fetch: func(ctx context.Context, c *member.Client, consistent bool) ([]wire.TokenInfo, error) {
			return c.ListMemberTokens(ctx, member.ReadOptions{Consistent: consistent})
		},
		header: "MACHINE\tISSUED AT",
		row: func(w io.Writer, t wire.TokenInfo) {
			fmt.Fprintf(w, "%s\t%s\n", t.Machine, t.IssuedAt)
		},
	})
}
