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
	return newGroup(&cobra.Command{
		Use:   "token",
		Short: "Issue, revoke or list member machine tokens",
		Long: `Manage machine tokens: member-scope credentials limited to one machine's
resources and leases. The cluster keeps only their SHA-256; a token is shown
once, when issued. These commands need the admin token (ELANOUS_TOKEN or
--token-file).`,
		Example: `  elanous-node token issue --machine mbp > mbp.token && chmod 600 mbp.token
  elanous-node token list
  elanous-node token revoke --machine mbp`,
	}, newTokenIssueCmd(), newTokenRevokeCmd(), newTokenListCmd())
}

func newTokenIssueCmd() *cobra.Command {
	var machine string
	cmd := newClientCmd(clientCmd[wire.IssuedToken]{
		cmd: &cobra.Command{
			Use:   "issue --machine M [--json]",
			Short: "Issue a machine token (replacing the machine's previous one) and print it once",
			Long: `Issue a token for one machine and print it on stdout — the only time it is
shown. Issuing again replaces the machine's previous token. Give the token to
the machine in a 0600 file and run "elanous-node join" there.`,
			Example: `  elanous-node token issue --machine mbp > mbp.token && chmod 600 mbp.token
  elanous-node token issue --machine mbp --json`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		jsonHelp: "print {machine, token, issuedAt} as JSON",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (wire.IssuedToken, error) {
			if !wire.ValidMachine(machine) {
				return wire.IssuedToken{}, fmt.Errorf("--machine %q is not a valid machine name", machine)
			}
			return runCall(cmd, flags, member.ScopeAdmin, "issue token for "+machine, func(ctx context.Context, c *member.Client) (wire.IssuedToken, error) {
				return c.IssueMemberToken(ctx, machine)
			})
		},
		text: func(cmd *cobra.Command, _ []string, issued wire.IssuedToken) error {
			fmt.Fprintf(cmd.ErrOrStderr(), "issued a token for %s at %s; it is shown only this once\n", issued.Machine, issued.IssuedAt)
			_, err := fmt.Fprintln(cmd.OutOrStdout(), issued.Token)
			return err
		},
	})
	cmd.Flags().StringVar(&machine, "machine", "", "machine the token is limited to (required)")
	_ = cmd.MarkFlagRequired("machine")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var machine string
	cmd := newClientCmd(clientCmd[struct{}]{
		cmd: &cobra.Command{
			Use:                   "revoke --machine M",
			Short:                 "Revoke a machine's token",
			Example:               `  elanous-node token revoke --machine mbp`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (struct{}, error) {
			_, err := runCall(cmd, flags, member.ScopeAdmin, "revoke token of "+machine, func(ctx context.Context, c *member.Client) (struct{}, error) {
				return struct{}{}, c.RevokeMemberToken(ctx, machine)
			})
			if member.IsNotFound(err) {
				return struct{}{}, fmt.Errorf("revoke token of %s: the machine has no token", machine)
			}
			return struct{}{}, err
		},
		text: func(cmd *cobra.Command, _ []string, _ struct{}) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "revoked the token of %s\n", machine)
			return err
		},
	})
	cmd.Flags().StringVar(&machine, "machine", "", "machine whose token to revoke (required)")
	_ = cmd.MarkFlagRequired("machine")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	return newList(listCommand[wire.TokenInfo]{
		cmd: &cobra.Command{
			Short: "List the machines that hold a token (never the tokens)",
			Example: `  elanous-node token list --json
  elanous-node token list --stale`,
		},
		scope:  member.ScopeAdmin,
		what:   "tokens",
		fetch:  (*member.Client).ListMemberTokens,
		header: "MACHINE\tISSUED AT",
		row: func(w io.Writer, t wire.TokenInfo) {
			fmt.Fprintf(w, "%s\t%s\n", t.Machine, t.IssuedAt)
		},
	})
}
