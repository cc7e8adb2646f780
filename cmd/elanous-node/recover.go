package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/cluster"
)

func newRecoverCmd() *cobra.Command {
	var peers string
	cmd := &cobra.Command{
		Use:   "recover --config F --peers M[,M...]",
		Short: "Rewrite a stopped node's Raft configuration after the cluster lost its quorum",
		Long: `Recover a cluster that lost its quorum (a majority of its voters is gone for
good), on a stopped node, offline. The node's latest snapshot is restored,
every entry of its log after it is applied — committed or not: this node's
log is the best copy left — and a new snapshot is written that carries the
new Raft configuration: the machines of --peers, every one a voter. The log
is compacted.

Run it on each survivor with the same --peers (this node must be one of
them), then start the survivors with "serve": they form a cluster of those
peers alone, keep their data and claim a new generation, and the leader drops
the lost machines from the candidate directory. Add fresh servers with
"peers add".

A peer's Raft address comes from the recovered state (candidate directory,
then Raft configuration), else from cluster.candidates of --config. The
command refuses to run while the node runs (its Raft store is locked), and
when the data directory holds no Raft state; nothing is changed then.

Entries that never committed may be applied by the recovery (Raft cannot tell
them from committed ones on a lone survivor); a write whose client saw 503
outcome-unknown may thus appear. Never run it while a quorum is alive: two
clusters would diverge.`,
		Example: `  # node-b and node-c are lost for good; on node-a, stopped:
  elanous-node recover --config /etc/elanous/elanous.yaml --peers node-a
  systemctl start elanous-node`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadCommandConfig(cmd)
			if err != nil {
				return err
			}
			if f := cmd.Flag("config"); f == nil || f.Value.String() == "" {
				return errors.New("--config is required: the node's configuration (node.id, node.data_dir)")
			}
			var list []string
			for _, p := range strings.Split(peers, ",") {
				if p = strings.TrimSpace(p); p != "" {
					list = append(list, p)
				}
			}
			var cands []cluster.Candidate
			for _, c := range cfg.Cluster.Candidates {
				cands = append(cands, cluster.Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft})
			}
			if _, ok := cfg.Self(); !ok {
				cands = append(cands, cluster.Candidate{Machine: cfg.Node.ID, Raft: cfg.Raft.Advertise})
			}
			res, err := cluster.Recover(cluster.RecoverConfig{ID: cfg.Node.ID, DataDir: cfg.Node.DataDir, Peers: list, Candidates: cands})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "recovered %s: index %d, term %d; state applied to %d, hash %s\n",
				cfg.Node.DataDir, res.Index, res.Term, res.AppliedIndex, res.StateHash)
			fmt.Fprintf(out, "records: %d resources, %d leases, %d tokens\n", res.Counts.Resources, res.Counts.Leases, res.Counts.Tokens)
			for _, s := range res.Servers {
				fmt.Fprintf(out, "voter %s at %s\n", s.Machine, s.Raft)
			}
			_, err = fmt.Fprintln(out, `start the node with "serve"; then add fresh servers with "peers add"`)
			return err
		},
	}
	cmd.Flags().StringVar(&peers, "peers", "", "comma-separated machines of the new configuration, this node included (required)")
	_ = cmd.MarkFlagRequired("peers")
	return cmd
}
