package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newLimitsCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "limits",
		Short: "Show or change the cluster's quotas",
		Long: `The cluster's quotas are replicated: every candidate refuses the same
commands (429 quota-exceeded) once a machine holds its limit of live resources
or port leases, the cluster its limit of resources, and the oldest remembered
Idempotency-Keys are forgotten past their limit. "limits get" shows them (query
scope) with the answering candidate's own limits (limits.* of its
configuration: write rate limits and connection and blocking-query caps, which
are not replicated). "limits set" changes the quotas through the log (admin
scope).`,
		Example: `  elanous-node limits get
  elanous-node limits set --resources-per-machine 2048
  elanous-node limits set --leases-per-machine 0   # back to a quarter of the test band`,
	}, newLimitsGetCmd(), newLimitsSetCmd())
}

func newLimitsGetCmd() *cobra.Command {
	var stale bool
	cmd := newClientCmd(clientCmd[wire.LimitsStatus]{
		cmd: &cobra.Command{
			Use:   "get [--json] [--stale]",
			Short: "Show the quotas as set and in force, and the answering candidate's own limits",
			Long: `Show the quotas: as set through the log ("default" when never set) and in
force, and whether they are enforced yet (they are once the cluster's format
level is 2, when every candidate runs a build that knows them). Then the
answering candidate's own limits (limits.*).

The quotas are read through the leader (?consistent=true); --stale reads the
answering candidate's state.`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		jsonHelp: "print one JSON document",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (wire.LimitsStatus, error) {
			return runCall(cmd, flags, member.ScopeQuery, "read limits", func(ctx context.Context, c *member.Client) (wire.LimitsStatus, error) {
				return c.Limits(ctx, member.ReadOptions{Consistent: !stale})
			})
		},
		text: printLimitsText,
	})
	bindStale(cmd, &stale)
	return cmd
}

func newLimitsSetCmd() *cobra.Command {
	var want wire.Limits
	cmd := newClientCmd(clientCmd[wire.LimitsStatus]{
		cmd: &cobra.Command{
			Use:   "set [--resources-per-machine N] [--leases-per-machine N] [--resources N] [--idempotency-keys N] [--json]",
			Short: "Change quotas through the log (admin)",
			Long: `Change the quotas named by flags, keeping the others as they are set; 0
restores a quota's default. The change goes through the log: once it is
applied every candidate enforces it. A quota below what a machine or the
cluster already holds removes nothing; it refuses new records until the count
falls below it.

The command reads the quotas as set, changes the ones given and writes the
whole set back (PUT /v1/cluster/limits); two admins setting different quotas at
the same moment may undo each other's change.`,
			Example: `  elanous-node limits set --resources-per-machine 2048 --resources 500000`,
			Args:    cobra.NoArgs,
		},
		jsonHelp: "print the limits in force as one JSON document",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (st wire.LimitsStatus, err error) {
			fl := cmd.Flags()
			changed := map[string]*int{
				"resources-per-machine": &want.ResourcesPerMachine, "leases-per-machine": &want.LeasesPerMachine,
				"resources": &want.Resources, "idempotency-keys": &want.IdempotencyKeys,
			}
			given := false
			for name, v := range changed {
				if fl.Changed(name) {
					given = true
					if *v < 0 {
						return st, fmt.Errorf("--%s must not be negative (0 restores the default)", name)
					}
				}
			}
			if !given {
				return st, errors.New("nothing to set: give at least one of --resources-per-machine, --leases-per-machine, --resources, --idempotency-keys")
			}
			c, err := scopedClient(cmd, flags, member.ScopeAdmin)
			if err != nil {
				return st, err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			err = withRetry(ctx, c, func(ctx context.Context) (err error) {
				st, err = c.Limits(ctx, member.ReadOptions{Consistent: true})
				return err
			})
			if err != nil {
				return st, fmt.Errorf("read limits: %w", explain(err, member.ScopeAdmin))
			}
			next := st.Set
			for name, v := range map[string]*int{
				"resources-per-machine": &next.ResourcesPerMachine, "leases-per-machine": &next.LeasesPerMachine,
				"resources": &next.Resources, "idempotency-keys": &next.IdempotencyKeys,
			} {
				if fl.Changed(name) {
					*v = *changed[name]
				}
			}
			err = withRetry(ctx, c, func(ctx context.Context) (err error) {
				st, err = c.SetLimits(ctx, next)
				return err
			})
			if err != nil {
				return st, fmt.Errorf("set limits: %w", explain(err, member.ScopeAdmin))
			}
			return st, nil
		},
		text: printLimitsText,
	})
	fl := cmd.Flags()
	fl.IntVar(&want.ResourcesPerMachine, "resources-per-machine", 0, "live resources one machine may hold (0: default 1024)")
	fl.IntVar(&want.LeasesPerMachine, "leases-per-machine", 0, "port leases one machine may hold (0: a quarter of the test band)")
	fl.IntVar(&want.Resources, "resources", 0, "resources in the whole cluster (0: default 250000)")
	fl.IntVar(&want.IdempotencyKeys, "idempotency-keys", 0, "Idempotency-Keys remembered (0: default 100000)")
	return cmd
}

// printLimitsText is printLimits on the command's stdout.
func printLimitsText(cmd *cobra.Command, _ []string, st wire.LimitsStatus) error {
	return printLimits(cmd.OutOrStdout(), st)
}

// printLimits prints the quotas, set and in force, then the node's limits.
func printLimits(w io.Writer, st wire.LimitsStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUOTA\tSET\tIN FORCE")
	row := func(name string, set, eff int) {
		s := "default"
		if set != 0 {
			s = strconv.Itoa(set)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\n", name, s, eff)
	}
	row("resources per machine", st.Set.ResourcesPerMachine, st.Effective.ResourcesPerMachine)
	row("leases per machine", st.Set.LeasesPerMachine, st.Effective.LeasesPerMachine)
	row("resources", st.Set.Resources, st.Effective.Resources)
	row("idempotency keys", st.Set.IdempotencyKeys, st.Effective.IdempotencyKeys)
	if err := tw.Flush(); err != nil {
		return err
	}
	if !st.Enforced {
		fmt.Fprintln(w, "not enforced yet: the cluster's format level is below 2 (a candidate runs an older build)")
	}
	if n := st.Node; n != nil {
		rate := "off"
		if n.WriteRate > 0 {
			rate = fmt.Sprintf("%g/s, bursts of %d", n.WriteRate, n.WriteBurst)
		}
		fmt.Fprintf(w, "\nthis candidate (limits.*): writes per machine token and per address %s; connections %d (%d per address); "+
			"blocking queries %d (%d per address); anonymous /v1/primary wait %s; connections to the leader %d\n",
			rate, n.Connections, n.ConnectionsPerAddress, n.BlockingQueries, n.BlockingQueriesPerAddress,
			time.Duration(n.AnonymousWaitMs)*time.Millisecond, n.ForwardConnections)
	}
	return nil
}

// limitsLine is the one-line summary of the quotas in `status`.
func limitsLine(st *wire.LimitsStatus) string {
	if st == nil {
		return "limits: unknown (no candidate reported them)"
	}
	e := st.Effective
	s := fmt.Sprintf("limits: %d resources per machine, %d leases per machine, %d resources, %d idempotency keys",
		e.ResourcesPerMachine, e.LeasesPerMachine, e.Resources, e.IdempotencyKeys)
	if !st.Enforced {
		s += " (not enforced yet: format level below 2)"
	}
	return s
}
