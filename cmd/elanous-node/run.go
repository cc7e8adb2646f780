package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/elanous/elanous-node/api"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// candidate is one running elanous-node candidate: its Raft node and its API.
type candidate struct {
	cfg   config.Config
	node  *cluster.Node
	api   *api.Server
	certs *certs.Store // nil without TLS
	errc  chan error
	log   *slog.Logger
	// auditFile is log.audit_file, closed at stop.
	auditFile io.Closer
}

// newLogger builds the process logger from log.level and log.format. Every
// line has time, level and msg; a candidate's lines add node (its machine
// name) and component: "cluster" (the Raft node), "raft" (hashicorp/raft's
// own lines), "api" (the HTTP API and its access log) or "main".
func newLogger(cfg config.Config, out io.Writer) *slog.Logger {
	return newLoggerWithLevel(cfg, out, new(slog.LevelVar))
}

// newLoggerWithLevel is newLogger with its minimum level held in level (set
// here from log.level), so a reload can change it; raft's lines follow it too,
// as they go through the same handler.
func newLoggerWithLevel(cfg config.Config, out io.Writer, level *slog.LevelVar) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(cfg.Log.Level))
	level.Set(l)
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
	audit, auditFile, err := openAuditLog(cfg)
	if err != nil {
		return nil, err
	}
	var cands []cluster.Candidate
	for _, c := range cfg.Cluster.Candidates {
		cands = append(cands, cluster.Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft})
	}
	cands = withSelf(cfg, cands)
	var store *certs.Store
	if cfg.TLS.Enabled() {
		s, err := certs.Load(certs.Files{CA: cfg.TLS.CAFile, Cert: cfg.TLS.CertFile, Key: cfg.TLS.KeyFile}, cfg.Node.ID)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		store = s
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		_ = auditFile.Close()
		return nil, fmt.Errorf("listen on http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	node, err := cluster.New(cluster.Config{
		ID: cfg.Node.ID, Candidates: cands, Bootstrap: cfg.Cluster.Bootstrap,
		DataDir: cfg.Node.DataDir, BindAddr: cfg.Raft.BindAddr(), Advertise: cfg.Raft.Advertise,
		HeartbeatTimeout: cfg.Raft.HeartbeatTimeout, ElectionTimeout: cfg.Raft.ElectionTimeout,
		LeaderLeaseTimeout: cfg.Raft.LeaderLeaseTimeout, CommitTimeout: cfg.Raft.CommitTimeout,
		SnapshotThreshold: cfg.Raft.SnapshotThreshold, SnapshotInterval: cfg.Raft.SnapshotInterval,
		TrailingLogs: cfg.Raft.TrailingLogs, MaxAppendEntries: cfg.Raft.MaxAppendEntries,
		BatchApply: cfg.Raft.BatchApply, ParallelWrite: cfg.Raft.ParallelWrite, LogCache: cfg.Raft.LogCache, NoFreelistSync: cfg.Raft.NoFreelistSync,
		MaxBatch: cfg.Raft.MaxBatch, FastFailover: cfg.Raft.FastFailover,
		Grace: cfg.Raft.GraceOrDefault(), TLS: store,
		RenewSlack: cfg.TTL.RenewSlack, RenewSlackMax: cfg.TTL.RenewSlackMax,
		Logger: logger,
	})
	if err != nil {
		_ = ln.Close()
		_ = auditFile.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfoCollector())
	apiLog := logger.With("node", cfg.Node.ID, "component", "api")
	srv := api.New(api.Deps{
		Node: node, Tokens: tokens, Band: api.Band{Start: cfg.Ports.Test.Start, End: cfg.Ports.Test.End},
		MetricsAuth: cfg.HTTP.MetricsAuth, Logger: apiLog, Registry: reg, TLS: store, VerifyClients: cfg.TLS.VerifyIncomingAPI,
		Limits: cfg.Limits, Audit: audit, Version: version,
	})
	if cfg.Log.Access {
		srv.LogRequests(apiLog)
	}
	log := logger.With("node", cfg.Node.ID, "component", "main")
	c := &candidate{cfg: cfg, node: node, api: srv, certs: store, errc: make(chan error, 1), log: log, auditFile: auditFile}
	go func() { c.errc <- srv.Serve(ln) }()
	log.Info("candidate started", "version", version, "http", cfg.HTTP.Addr, "raft", cfg.Raft.BindAddr(), "data_dir", cfg.Node.DataDir,
		"tls", store != nil)
	if store != nil {
		logCertificate(log, store)
	}
	return c, nil
}

// logCertificate logs the certificate in use and when it expires.
func logCertificate(logger *slog.Logger, store *certs.Store) {
	leaf := store.Current().Leaf
	logger.Info("tls certificate", "file", store.Files().Cert, "names", leaf.DNSNames, "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	if left := time.Until(leaf.NotAfter); left < 30*24*time.Hour {
		logger.Warn("tls certificate expires soon; issue a new one and send SIGHUP", "file", store.Files().Cert, "expires_in", left.Round(time.Hour))
	}
}

// stop hands leadership over if this node leads, drains the API, then shuts
// Raft down and closes the stores.
func (c *candidate) stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.node.TransferLeadership(ctx)
	apiErr := c.api.Shutdown(ctx)
	nodeErr := c.node.Close(ctx)
	_ = c.auditFile.Close()
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
