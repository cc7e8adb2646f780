package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/config"
)

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run this machine's candidate: its Raft node and the HTTP API",
		Long: `Run one candidate of an elanous-node cluster until SIGINT or SIGTERM.

The node keeps its Raft log, stable store and snapshots under
<node.data_dir>/raft and reads the cluster tokens from tokens.file
(default <node.data_dir>/control/tokens.json, mode 0600; create it with
"elanous-node init" and copy it to every candidate).

A node with no Raft state bootstraps the cluster from cluster.candidates when
cluster.bootstrap is true; every candidate may be given the same list. A node
with state never bootstraps again. On SIGTERM a leader hands leadership to
another candidate before it exits, so the cluster does not wait out an
election timeout.`,
		Example: `  elanous-node serve --config /etc/elanous/elanous.yaml
  ELANOUS_HTTP_ADDR=0.0.0.0:31413 elanous-node serve --config elanous.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadCommandConfig(cmd)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			tokens, err := readTokensFile(cfg.TokensFile())
			if err != nil {
				return err
			}
			logger := newLogger(cfg, os.Stderr)
			c, err := startCandidate(cfg, tokens, logger, os.Stderr)
			if err != nil {
				return err
			}
			select {
			case <-cmd.Context().Done():
				logger.Info("signal received, stopping")
			case err := <-c.errc:
				_ = c.stop(5 * time.Second)
				return fmt.Errorf("http server: %w", err)
			}
			return c.stop(10 * time.Second)
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}
