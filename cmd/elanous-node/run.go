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
	"github.com/prometheus/client_golang/prometheus"
)

// candidate is one running elanous-node candidate: its Raft node and its API.
type candidate struct {
	cfg  config.Config
	node *cluster.Node
	api  *api.Server
	errc chan error
	log  *slog.Logger
}

// newLogger builds the process logger from log.level and log.format. Every
// line has time, level and msg; a candidate's lines add node (its machine
// name) and component: "cluster" (the Raft node), "raft" (hashicorp/raft's
// own lines), "api" (the HTTP API and its access log) or "main".
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
// Its metrics registry has the build info, the node's and raft's figures and
// the API's.
func startCandidate(cfg config.Config, tokens wire.TokensFile, logger *slog.Logger) (*candidate, error) {
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
		Logger: logger,
	})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfoCollector())
	apiLog := logger.With("node", cfg.Node.ID, "component", "api")
	srv := api.New(api.Deps{
		Node: node, Tokens: tokens, Band: api.Band{Start: cfg.Ports.Test.Start, End: cfg.Ports.Test.End},
		MetricsAuth: cfg.HTTP.MetricsAuth, Logger: apiLog, Registry: reg, Version: version,
	})
	if cfg.Log.Access {
		srv.LogRequests(apiLog)
	}
	log := logger.With("node", cfg.Node.ID, "component", "main")
	c := &candidate{cfg: cfg, node: node, api: srv, errc: make(chan error, 1), log: log}
	go func() { c.errc <- srv.Serve(ln) }()
	log.Info("candidate started", "version", version, "http", cfg.HTTP.Addr, "raft", cfg.Raft.Addr, "data_dir", cfg.Node.DataDir)
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
	c.log.Info("candidate stopped")
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
