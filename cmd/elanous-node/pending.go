package main

// Placeholders for commands other files will provide. Delete a constructor
// here when its real implementation lands; delete the file with the last one.

import (
	"errors"

	"github.com/spf13/cobra"
)

// pendingCmd is a command whose implementation has not landed yet.
func pendingCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("not implemented yet")
		},
	}
}

func newStatusCmd() *cobra.Command {
	return pendingCmd("status", "Show every candidate's Raft state, then the primary and counts")
}

func newTokenCmd() *cobra.Command {
	return pendingCmd("token", "Issue, revoke or list member machine tokens")
}

func newLeaseCmd() *cobra.Command {
	return pendingCmd("lease", "Acquire, release or list port leases")
}

func newResourcesCmd() *cobra.Command {
	return pendingCmd("resources", "List the resources members have registered")
}

func newMemberCmd() *cobra.Command {
	return pendingCmd("member", "Run the member agent on a fleet machine")
}

func newJoinCmd() *cobra.Command {
	return pendingCmd("join", "Write the join file a member machine uses to reach the cluster")
}
