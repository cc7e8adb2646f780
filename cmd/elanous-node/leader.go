package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newLeaderCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "leader",
		Short: "Move leadership between candidates",
	}, newLeaderTransferCmd())
}

func newLeaderTransferCmd() *cobra.Command {
	var to string
	cmd := newClientCmd(clientCmd[wire.TransferResult]{
		cmd: &cobra.Command{
			Use:   "transfer [--to MACHINE]",
			Short: "Hand leadership to another candidate before maintenance (admin)",
			Long: `Ask the leader to hand leadership over (POST /v1/cluster/leader/transfer,
admin scope): to MACHINE with --to, else to the most up-to-date other voter.
The leader brings the target up to date and tells it to start an election at
once, so the cluster does not wait out an election timeout. The command
returns once the new leader's claim is applied on the candidate that answers;
writes meanwhile wait for the new leader (they are not refused).

If MACHINE already leads, nothing happens. It fails with 409 transfer-failed
when the target could not take over (the current leader leads on).`,
			Example:               `  ELANOUS_TOKEN=<admin token> elanous-node leader transfer --config /etc/elanous/elanous.yaml --to node-c`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		jsonHelp: "print the result as JSON",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (res wire.TransferResult, err error) {
			if to != "" && !wire.ValidCandidate(to) {
				return res, fmt.Errorf("--to %q is not a candidate name (%s)", to, wire.CandidatePatternText)
			}
			client, err := scopedClient(cmd, flags, member.ScopeAdmin)
			if err != nil {
				return res, err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			call := func(ctx context.Context) (err error) {
				res, err = client.TransferLeader(ctx, to)
				return err
			}
			err = call(ctx)
			// Once more after a failover or an unreachable candidate, but
			// never after outcome-unknown: leadership may have moved already.
			if err != nil && ctx.Err() == nil && member.IsRetryable(err) && member.ErrorCode(err) != wire.CodeOutcomeUnknown {
				if _, rerr := client.Reresolve(ctx); rerr == nil {
					err = call(ctx)
				}
			}
			if err != nil {
				return res, explain(err, member.ScopeAdmin)
			}
			return res, nil
		},
		text: func(cmd *cobra.Command, _ []string, res wire.TransferResult) error {
			if res.Holder == res.From {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s already leads (generation %d)\n", res.Holder, res.Generation)
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "leadership moved from %s to %s (generation %d) in %s\n",
				res.From, res.Holder, res.Generation, time.Duration(res.TookMs)*time.Millisecond)
			return err
		},
	})
	cmd.Flags().StringVar(&to, "to", "", "the candidate to hand leadership to (default: the most up-to-date other voter)")
	return cmd
}
