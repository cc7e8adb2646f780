package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// defaultInstancePort is the port of the instance endpoint member run
// registers when --endpoint is not given (the reserved nexus port).
const defaultInstancePort = 31414

func newMemberCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "member",
		Short: "Run the member agent on a fleet machine",
		Long: `Commands for member machines: machines of the fleet that register with the
cluster and keep their records alive. Set a machine up with "elanous-node
join", then run "elanous-node member run" (e.g. under systemd).`,
		Example: `  elanous-node join --url http://10.0.0.1:31413 --token-file mbp.token --machine mbp
  elanous-node member run --candidates node-a=http://10.0.0.1:31413,node-b=http://10.0.0.2:31413,node-c=http://10.0.0.3:31413`,
	}, newMemberRunCmd())
}

func newMemberRunCmd() *cobra.Command {
	var (
		flags                       clientFlags
		machine, instance, endpoint string
		interval                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run [--candidates URLS] [--machine NAME] [--instance ID] [--endpoint URL] [--interval DUR]",
		Short: "Register this machine and keep it alive with heartbeats until interrupted",
		Long: `Register this machine (resource "machine:<name>", with its load: load
averages, CPU count, free and total memory) and one instance with its
endpoint, then heartbeat every --interval until SIGINT or SIGTERM — the
behaviour of the elanous 0.2.4 TypeScript member: records carry a 600 s TTL,
the instance is refreshed every 300 s, a lost record is registered again at
once, and failures back off up to 300 s. A failover costs one retry: after a
network error or a 503 the primary is resolved again at once, and claims of
new primaries are followed as they happen.

The candidate list follows the cluster's: the member asks the candidate it
sends its token to for GET /v1/cluster/peers (a blocking query, so a change
is seen at once) and uses the servers listed from then on. When the token is
the join file's, the list is kept in the join file ("candidates"), so a
replaced candidate machine needs no change on the member, even across
restarts.

The token (member scope, or this machine's token) comes from ELANOUS_TOKEN,
--token-file or the join file; the machine name from --machine, the join
file, or the hostname.

It logs to stderr as log.level and log.format say (config file,
ELANOUS_LOG_LEVEL, ELANOUS_LOG_FORMAT; default info, text).`,
		Example: `  # after "elanous-node join", with the candidates from the config file
  elanous-node member run --config /etc/elanous/elanous.yaml

  # explicit candidates and a faster heartbeat
  ELANOUS_TOKEN=<member token> elanous-node member run \
    --candidates http://10.0.0.1:31413,http://10.0.0.2:31413,http://10.0.0.3:31413 \
    --machine mbp --endpoint http://10.0.0.9:31414 --interval 10s`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := flags.env(cmd, member.ScopeMember)
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			if machine == "" && env.join != nil {
				machine = env.join.Machine
			}
			if machine == "" {
				machine = host
			}
			if !wire.ValidMachine(machine) {
				return fmt.Errorf("machine name %q is not valid; pass --machine", machine)
			}
			if instance == "" {
				instance = "instance:" + machine + "/member"
			}
			if endpoint == "" {
				if host == "" {
					return errors.New("--endpoint is required (no hostname)")
				}
				endpoint = fmt.Sprintf("http://%s:%d", host, defaultInstancePort)
			}
			cfg, err := loadClientConfig(cmd)
			if err != nil {
				return err
			}
			if err := checkLogConfig(cfg.Log); err != nil {
				return err
			}
			logger := newLogger(cfg, cmd.ErrOrStderr()).With("component", "member")
			env.logger = logger
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			target, err := c.Target(ctx)
			if err != nil {
				return err
			}
			logger.Info("member starting", "machine", machine, "instance", instance, "endpoint", endpoint,
				"primary", target.URL, "generation", target.Generation, "candidates_from", env.from, "token_from", env.tokenFrom)
			hb, err := member.StartHeartbeat(ctx, member.HeartbeatConfig{
				Client:   c,
				Machine:  member.Resource{ID: "machine:" + machine, Name: machine},
				Instance: member.Resource{ID: instance, Name: instance},
				Endpoint: endpoint,
				Interval: interval,
				Logger:   logger,
			})
			if err != nil {
				return err
			}
			followDone := make(chan struct{}, 2)
			go func() {
				defer func() { followDone <- struct{}{} }()
				_ = c.FollowPrimary(ctx)
			}()
			go func() {
				defer func() { followDone <- struct{}{} }()
				_ = c.FollowCandidates(ctx, member.CandidateRefresh{JoinRoot: env.dataDir, Logger: logger})
			}()
			<-ctx.Done()
			hb.Stop()
			<-followDone
			<-followDone
			logger.Info("member stopped", "machine", machine)
			return nil
		},
	}
	flags.bind(cmd)
	fs := cmd.Flags()
	fs.StringVar(&machine, "machine", "", "this machine's name (default: the join file's machine, else the hostname)")
	fs.StringVar(&instance, "instance", "", `instance resource id (default "instance:<machine>/member")`)
	fs.StringVar(&endpoint, "endpoint", "", fmt.Sprintf("instance endpoint (default http://<hostname>:%d)", defaultInstancePort))
	fs.DurationVar(&interval, "interval", member.DefaultHeartbeatInterval, "heartbeat interval (at most 5m)")
	return cmd
}

// checkLogConfig refuses a log.level or log.format newLogger does not know.
func checkLogConfig(l config.LogConfig) error {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level %q must be one of debug, info, warn, error", l.Level)
	}
	switch l.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format %q must be one of text, json", l.Format)
	}
	return nil
}
