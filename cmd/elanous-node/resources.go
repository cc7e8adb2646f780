package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newResourcesCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "resources",
		Short: "List the resources members have registered",
		Long: `Inspect the machines and instances members register and keep alive with
heartbeats (query scope).`,
		Example: `  elanous-node resources list --kind machine`,
	}, newResourcesListCmd())
}

func newResourcesListCmd() *cobra.Command {
	var kind, machine string
	cmd := newList(listCommand[wire.Resource]{
		cmd: &cobra.Command{
			Use:   "list [--kind K] [--machine M] [--json] [--stale]",
			Short: "List registered resources, optionally of one kind or machine",
			Example: `  elanous-node resources list
  elanous-node resources list --kind instance --machine mbp --json
  elanous-node resources list --stale`,
		},
		scope: member.ScopeQuery,
		what:  "resources",
		fetch: func(c *member.Client, ctx context.Context, o member.ReadOptions) ([]wire.Resource, error) {
			return c.ListResources(ctx, member.ResourceFilter{Kind: kind, Machine: machine, Consistent: o.Consistent})
		},
		header: "ID\tKIND\tMACHINE\tENDPOINT\tRENEWED\tEXPIRES",
		row: func(w io.Writer, r wire.Resource) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Machine, orDash(r.Endpoint), msTime(r.RenewedAt), msTime(r.ExpiresAt))
		},
	})
	cmd.Flags().StringVar(&kind, "kind", "", "only resources of this kind (machine, instance)")
	cmd.Flags().StringVar(&machine, "machine", "", "only resources of this machine")
	return cmd
}
