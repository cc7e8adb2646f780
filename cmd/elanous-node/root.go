package main

import (
	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/config"
)

// newRootCmd builds the elanous-node command tree. Every subcommand has its
// own constructor and file; nothing is kept in package variables.
func newRootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "elanous-node",
		Short: "Highly available coordinator for a fleet of machines",
		Long: `elanous-node is a highly available coordinator for a fleet of machines.

Three (or five) candidate machines run "elanous-node serve"; together they
form a Raft cluster that keeps the fleet's registered resources, port leases,
member tokens and the primary claim. Members register, heartbeat and lease
ports through any candidate, which forwards writes to the leader.

Start here:
  elanous-node dev      three candidates in one process on 127.0.0.1, for trying it out
  elanous-node init     create the cluster tokens file, then copy it to every candidate
  elanous-node tls      make the cluster CA and each candidate's certificate
  elanous-node serve    run one candidate of a real cluster (see --config)
  elanous-node status   show every candidate's view of the cluster

Configuration comes from elanous.yaml (--config), ELANOUS_* environment
variables (ELANOUS_HTTP_ADDR for http.addr) and flags, in increasing order of
precedence.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
	}
	cmd.SetVersionTemplate(versionLine() + "\n")
	cmd.PersistentFlags().String("config", "", "path to elanous.yaml")
	cmd.AddCommand(
		newServeCmd(),
		newDevCmd(),
		newUICmd(),
		newInitCmd(),
		newStatusCmd(),
		newTokenCmd(),
		newLimitsCmd(),
		newLeaseCmd(),
		newResourcesCmd(),
		newMemberCmd(),
		newJoinCmd(),
		newBenchCmd(),
		newHealthCmd(),
		newTLSCmd(),
		newPeersCmd(),
		newRecoverCmd(),
		newVersionCmd(),
		newSnapshotCmd(),
		newLeaderCmd(),
	)
	return cmd
}

// loadCommandConfig loads the configuration for cmd: the --config file, the
// ELANOUS_* environment and those of cmd's flags that name a config key
// (see config.BindFlags). It does not validate.
func loadCommandConfig(cmd *cobra.Command) (config.Config, error) {
	return config.Load(config.LoadOptions{Flags: cmd.Flags()})
}
