package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
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
with state never bootstraps again. A node with no Raft state and
cluster.bootstrap false waits to be added ("elanous-node peers add" against the
cluster); until then /v1/ready answers 503 not-ready. Once the cluster has its
replicated candidate directory, cluster.candidates is no longer read for
membership (see "elanous-node peers --help"). On SIGTERM a leader hands leadership to
another candidate before it exits, so the cluster does not wait out an
election timeout.

Under systemd (Type=notify, NOTIFY_SOCKET set) it reports READY=1 once the
node serves: a leader is known and its claim is applied here, as /v1/ready
answers 200. Until then its STATUS says it waits for a leader, so
"systemctl start" on the first candidate returns only once a quorum is up.

With tls.ca_file, tls.cert_file and tls.key_file the API is HTTPS and Raft is
mutual TLS (see "elanous-node tls --help"). Without them serve listens only
on loopback addresses, unless tls.allow_plaintext is true.

SIGHUP reloads, without a restart or a leader change: the certificate files
(new connections use them; a set that does not load is refused and the old
one kept), tokens.json (the new cluster tokens replace the old at once) and
log.level from the configuration. Other keys need a restart.`,
		Example: `  elanous-node serve --config /etc/elanous/elanous.yaml
  ELANOUS_HTTP_ADDR=0.0.0.0:31413 elanous-node serve --config elanous.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGHUP reloads; caught from the start so it never stops the node.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
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
			level := new(slog.LevelVar)
			logger := newLoggerWithLevel(cfg, os.Stderr, level)
			c, err := startCandidate(cfg, tokens, logger)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			notified := make(chan struct{})
			go func() {
				defer close(notified)
				c.notifyReady(ctx)
			}()
		wait:
			for {
				select {
				case <-hup:
					c.reload(func() (config.Config, error) { return loadCommandConfig(cmd) }, level)
				case <-cmd.Context().Done():
					c.log.Info("signal received, stopping")
					break wait
				case err := <-c.errc:
					cancel()
					<-notified
					_ = c.stop(5 * time.Second)
					return fmt.Errorf("http server: %w", err)
				}
			}
			cancel()
			<-notified
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return c.stop(10 * time.Second)
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}

// notifyReady tells systemd (when NOTIFY_SOCKET is set) that the candidate
// is waiting for a leader, then READY=1 once it serves. It returns after
// READY=1, at once without NOTIFY_SOCKET, or when ctx is done.
func (c *candidate) notifyReady(ctx context.Context) {
	sent, err := daemon.SdNotify(false, "STATUS=waiting for a leader and its claim")
	if !sent {
		if err != nil {
			c.log.Warn("systemd notification failed", "err", err)
		}
		return
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !c.node.Ready() {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving"); err != nil {
		c.log.Warn("systemd notification failed", "err", err)
		return
	}
	c.log.Info("ready; notified systemd")
}
