package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// Exit statuses of `lease check`.
const (
	exitFenceValid = 0
	exitFenceStale = 1
	exitFenceError = 2
)

// fenceVerdict is the --json line of `lease check`: the cluster's 200 answer
// when the fence is valid, the refusal's reason (and the port's live fence,
// when it has one) when it is stale.
type fenceVerdict struct {
	Valid        bool   `json:"valid"`
	Port         int    `json:"port"`
	Fence        uint64 `json:"fence"`
	Generation   uint64 `json:"generation,omitempty"`
	Machine      string `json:"machine,omitempty"`
	ExpiresAt    int64  `json:"expiresAt,omitempty"`
	CurrentFence uint64 `json:"currentFence,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// fenceFailure marks err as the check not having run (exit 2).
func fenceFailure(err error) error { return &exitError{code: exitFenceError, err: err} }

func newLeaseCheckCmd() *cobra.Command {
	var (
		flags  clientFlags
		port   int
		fence  uint64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "check --port P --fence F [--json]",
		Short: "Check whether a fence is the fence of a port's live lease",
		Long: `Ask the cluster whether fence F is the fence of the live lease on port P
(POST /v1/fences/check, query scope). Every grant of a port carries a fence,
its log index, which increases strictly across the cluster; a downstream
system uses the check to refuse a holder that lost its lease (it paused, the
lease expired or was released, the port was granted again).

The check is linearizable through any candidate: it never calls valid a
fence the leader has moved past. See docs/fences.md.

Exit status: 0 the fence is valid, 1 it is stale (the reason is printed),
2 the check could not be made (bad flags, no leader, unreachable, a token
without the query scope or for another machine).`,
		Example: `  elanous-node lease check --port 31450 --fence 1234 && run-dangerous-step
  elanous-node lease check --port 31450 --fence 1234 --json | jq .currentFence`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fenceFailure(fmt.Errorf("lease check takes no arguments, got %q", args))
			}
			return nil
		},
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case !wire.ValidPort(port):
				return fenceFailure(errors.New("--port is required (1-65535)"))
			case fence == 0:
				return fenceFailure(errors.New("--fence is required (the fence of a port grant, a positive integer)"))
			}
			c, err := scopedClient(cmd, &flags, member.ScopeQuery)
			if err != nil {
				return fenceFailure(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			var check wire.FenceCheck
			err = withRetry(ctx, c, func(ctx context.Context) (err error) {
				check, err = c.CheckFence(ctx, port, fence)
				return err
			})
			var stale *member.StaleFenceError
			switch {
			case errors.As(err, &stale):
				if asJSON {
					v := fenceVerdict{Port: port, Fence: fence, CurrentFence: stale.Current, Reason: stale.Reason}
					if err := writeJSON(cmd.OutOrStdout(), v); err != nil {
						return fenceFailure(err)
					}
				}
				return &exitError{code: exitFenceStale, err: fmt.Errorf("fence %d on port %d is stale: %s", fence, port, stale.Reason)}
			case err != nil:
				return fenceFailure(fmt.Errorf("check fence %d on port %d: %w", fence, port, explain(err, member.ScopeQuery)))
			}
			if asJSON {
				v := fenceVerdict{Valid: true, Port: check.Port, Fence: check.Fence, Generation: check.Generation,
					Machine: check.Machine, ExpiresAt: check.ExpiresAt}
				if err := writeJSON(cmd.OutOrStdout(), v); err != nil {
					return fenceFailure(err)
				}
				return nil
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "fence %d on port %d is valid: the lease of %s (generation %d), expires %s unless renewed\n",
				check.Fence, check.Port, check.Machine, check.Generation, msTime(check.ExpiresAt))
			if err != nil {
				return fenceFailure(err)
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fenceFailure(err) })
	flags.bind(cmd)
	fs := cmd.Flags()
	fs.IntVar(&port, "port", 0, "the leased port (required)")
	fs.Uint64Var(&fence, "fence", 0, "the fence its grant carried (required)")
	fs.BoolVar(&asJSON, "json", false, "print the verdict as one line of JSON")
	return cmd
}
