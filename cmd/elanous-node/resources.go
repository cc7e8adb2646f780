package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newResourcesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resources",
		Short: "List the resources members have registered",
		Long: `Inspect the machines and instances members register and keep alive with
heartbeats (query scope).`,
		Example: `  elanous-node resources list --kind machine`,
	}
	cmd.AddCommand(newResourcesListCmd())
	return cmd
}

func newResourcesListCmd() *cobra.Command {
	var (
		flags         clientFlags
		kind, machine string
		asJSON, stale bool
	)
	cmd := &cobra.Command{
		Use:   "list [--kind K] [--machine M] [--json] [--stale]",
		Short: "List registered resources, optionally of one kind or machine",
		Long:  "List registered resources, optionally of one kind or machine.\n\n" + listReadHelp,
		Example: `  elanous-node resources list
  elanous-node resources list --kind instance --machine mbp --json
  elanous-node resources list --stale`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := scopedClient(cmd, &flags, member.ScopeQuery)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			var list []wire.Resource
			err = withRetry(ctx, c, func(ctx context.Context) (err error) {
				list, err = c.ListResources(ctx, member.ResourceFilter{Kind: kind, Machine: machine, Consistent: !stale})
				return err
			})
			if err != nil {
				return fmt.Errorf("list resources: %w", explain(err, member.ScopeQuery))
			}
			if asJSON {
				if list == nil {
					list = []wire.Resource{}
				}
				return writeJSON(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tMACHINE\tENDPOINT\tRENEWED\tEXPIRES")
			for _, r := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Machine, orDash(r.Endpoint), msTime(r.RenewedAt), msTime(r.ExpiresAt))
			}
			return tw.Flush()
		},
	}
	flags.bind(cmd)
	cmd.Flags().StringVar(&kind, "kind", "", "only resources of this kind (machine, instance)")
	cmd.Flags().StringVar(&machine, "machine", "", "only resources of this machine")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	bindStale(cmd, &stale)
	return cmd
}
