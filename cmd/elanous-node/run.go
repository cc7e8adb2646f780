package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/config"
)

// candidate is one running elanous-node candidate: its Raft node and its API.
type candidate struct {
	cfg  config.Config
	node *cluster.Node
	api  *api.Server
	errc chan error
	log  *slog.Logger
}

// newLogger builds the process logger from the log.* keys.
func newLogger(cfg config.Config, out io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// startCandidate opens the node's stores, starts Raft and serves the API.
func startCandidate(cfg config.Config, tokens wire.TokensFile, logger *slog.Logger, logOut io.Writer) (*candidate, error) {
	var cands []cluster.Candidate
	for _, c := range cfg.Cluster.Candidates {
		cands = append(cands, cluster.Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft})
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	node, err := cluster.New(cluster.Config{
		ID: cfg.Node.ID, Candidates: cands, Bootstrap: cfg.Cluster.Bootstrap,
		DataDir: cfg.Node.DataDir, BindAddr: cfg.Raft.Addr, Advertise: cfg.Raft.Advertise,
		HeartbeatTimeout: cfg.Raft.HeartbeatTimeout, ElectionTimeout: cfg.Raft.ElectionTimeout,
		LeaderLeaseTimeout: cfg.Raft.LeaderLeaseTimeout, CommitTimeout: cfg.Raft.CommitTimeout,
		SnapshotThreshold: cfg.Raft.SnapshotThreshold, SnapshotInterval: cfg.Raft.SnapshotInterval,
		TrailingLogs: cfg.Raft.TrailingLogs, MaxAppendEntries: cfg.Raft.MaxAppendEntries,
		Grace:  cfg.Raft.GraceOrDefault(),
		Logger: logger, LogOutput: logOut, LogJSON: cfg.Log.Format == "json",
	})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	srv := api.New(api.Deps{
		Node: node, Tokens: tokens, Band: api.Band{Start: cfg.Ports.Test.Start, End: cfg.Ports.Test.End},
		MetricsAuth: cfg.HTTP.MetricsAuth, Logger: logger,
	})
	c := &candidate{cfg: cfg, node: node, api: srv, errc: make(chan error, 1), log: logger}
	go func() { c.errc <- srv.Serve(ln) }()
	logger.Info("candidate started", "machine", cfg.Node.ID, "http", cfg.HTTP.Addr, "raft", cfg.Raft.Addr, "data_dir", cfg.Node.DataDir)
	return c, nil
}

// stop hands leadership over if this node leads, drains the API, then shuts
// Raft down and closes the stores.
func (c *candidate) stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.node.TransferLeadership(ctx)
	apiErr := c.api.Shutdown(ctx)
	nodeErr := c.node.Close(ctx)
	c.log.Info("candidate stopped", "machine", c.cfg.Node.ID)
	if apiErr != nil {
		return fmt.Errorf("stop api: %w", apiErr)
	}
	return nodeErr
}

// waitReady polls until the node serves (a leader known, its claim applied).
func (c *candidate) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !c.node.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("candidate %s not ready: %w", c.cfg.Node.ID, ctx.Err())
		case err := <-c.errc:
			return fmt.Errorf("candidate %s api: %w", c.cfg.Node.ID, err)
		case <-tick.C:
		}
	}
	return nil
}
