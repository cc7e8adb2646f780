package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/cluster/transport"
	"github.com/elanous/elanous-node/config/defaults"
	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Candidate is one machine that may lead: its name (the Raft server ID), its
// HTTP URL and its Raft address.
type Candidate struct {
	Machine string
	URL     string
	Raft    string
}

// Config configures a Node. Zero durations take the defaults noted.
type Config struct {
	ID         string      // this node's machine name; must be among Candidates
	Candidates []Candidate // the voters; bootstrap uses them when the node has no Raft state
	Bootstrap  bool        // bootstrap a new cluster when there is no Raft state

	// DataDir holds raft/raft.db and raft/snapshots. Ignored when Stores is set.
	DataDir string
	// Stores, when set, replaces the on-disk stores (raft's in-memory ones,
	// for instance).
	Stores *Stores
	// BindAddr and Advertise are the TCP transport's addresses. Ignored when
	// Transport is set.
	BindAddr  string
	Advertise string
	// Transport, when set, replaces the TCP transport (raft.InmemTransport,
	// for instance).
	Transport raft.Transport
	// TLS, when set, makes the transport mutual TLS with these certificates:
	// a peer must present a certificate of the CA naming a candidate, and a
	// dial to a candidate must reach a certificate naming that candidate.
	// Ignored when Transport is set.
	TLS *certs.Store

	// Raft's timings and log figures (config raft.*); a zero field takes
	// the config default of the same name (config/defaults), so a caller
	// that sets none runs with what elanous-node serve runs with.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
	MaxAppendEntries   int
	// Grace is added to every remaining TTL when a new leader claims; default
	// twice the election timeout.
	Grace time.Duration
	// SweepInterval bounds the time between Sweeps while any TTL is live; default 5s.
	SweepInterval time.Duration
	// ClaimTimeout bounds the Barrier and the claim after an election; default 10s.
	ClaimTimeout time.Duration
	// MaxBatch is the most commands one group-commit entry carries; default
	// raft.max_batch's (config/defaults), and 1 turns group commit off. Batches are proposed only once the
	// cluster's format level is at least 2.
	MaxBatch int
	// EventRing is how many recent changes the node keeps for resuming
	// event streams (GET /v1/events); default fsm.DefaultEventRing.
	EventRing int
	// MaxInflight is how many entries the batcher keeps in flight; default 1.
	MaxInflight int
	// BatchApply is hashicorp/raft's BatchApplyCh: the leader takes up to
	// MaxAppendEntries queued entries per disk write.
	BatchApply bool
	// ParallelWrite lets the leader's replicators send new entries while
	// the leader is still writing them to its log store (the Raft thesis,
	// §10.2.1; third_party/raft's Config.ParallelLeaderWrite). An entry
	// still commits only once a quorum, the leader counted after its own
	// write, holds it on disk.
	ParallelWrite bool
	// LogCache keeps that many recent entries in memory in front of the log
	// store (0: none).
	LogCache int
	// NoFreelistSync skips boltdb's freelist write on each commit.
	NoFreelistSync bool
	// FormatProbe is how the leader learns the other servers' format levels;
	// see SetFormatProbe.
	FormatProbe FormatProbe
	// FormatCheckInterval is how often a leader whose cluster is below this
	// build's format level asks the servers for theirs; default 5s.
	FormatCheckInterval time.Duration
	// HealthProbe is how the leader learns how far another server has
	// applied the log; see SetHealthProbe.
	HealthProbe HealthProbe
	// MembershipInterval is how often the leader probes the servers, keeps
	// the candidate directory in step with Raft and promotes caught-up
	// non-voters (membership_maintain.go); default 1s.
	MembershipInterval time.Duration
	// ServerStabilization is how long a new server must stay caught up
	// before the leader promotes it to voter; default 3s.
	ServerStabilization time.Duration
	// MaxLag is how many entries a server may have applied fewer than the
	// leader and still count as caught up; default 256.
	MaxLag uint64
	// FastFailover makes a follower whose leader's process died (its Raft
	// address refuses connections) stand for election as soon as raft's
	// rules allow, in an order shared with the other survivors
	// (leader_failover.go). It needs the TCP or TLS transport (not Transport) and,
	// to order the survivors by their logs, a HealthProbe.
	FastFailover bool

	// RenewSlack is the renewal slack as a fraction of a record's TTL
	// (ttl.renew_slack): a renewal the state does not cover is written to
	// expire at now + TTL + slack, and renewals the state covers write
	// nothing (renew.go). 0 makes every renewal a write.
	RenewSlack float64
	// RenewSlackMax caps the slack (ttl.renew_slack_max); default that key's
	// (config/defaults).
	RenewSlackMax time.Duration
	// ConfirmProbe is how a follower confirms renewals with the leader; see
	// SetConfirmProbe.
	ConfirmProbe ConfirmProbe

	// WallClock is read once per election won; default the system clock.
	WallClock func() time.Time
	// Logger receives the node's lines (with node=<ID>, component=cluster)
	// and raft's own (component=raft); default: discard.
	Logger *slog.Logger

	// beforeApply, when set, is called on raft's FSM goroutine with each log
	// entry before the state machine applies it; while it runs the node
	// applies nothing. Unexported, so only this package sets it; when it is
	// nil New hands raft the state machine itself.
	beforeApply func(*raft.Log)
}

// Stores are the three raft stores of a node.
type Stores struct {
	Logs      raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, defaults.HeartbeatTimeout)
	def(&c.ElectionTimeout, defaults.ElectionTimeout)
	def(&c.LeaderLeaseTimeout, defaults.LeaderLeaseTimeout)
	def(&c.CommitTimeout, defaults.CommitTimeout)
	def(&c.SnapshotInterval, defaults.SnapshotInterval)
	def(&c.Grace, defaults.Grace(c.ElectionTimeout))
	def(&c.SweepInterval, 5*time.Second)
	def(&c.ClaimTimeout, 10*time.Second)
	def(&c.FormatCheckInterval, 5*time.Second)
	def(&c.MembershipInterval, time.Second)
	def(&c.ServerStabilization, 3*time.Second)
	def(&c.RenewSlackMax, defaults.RenewSlackMax)
	if c.MaxLag == 0 {
		c.MaxLag = 256
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = defaults.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = defaults.TrailingLogs
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = defaults.MaxAppendEntries
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaults.MaxBatch
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = defaultMaxInflight
	}
	if c.WallClock == nil {
		c.WallClock = systemWallClock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Node is one candidate's Raft node and its state machine.
type Node struct {
	cfg   Config
	fsm   *fsm.FSM
	raft  *raft.Raft
	trans raft.Transport
	// stream is the plaintext transport's stream layer (nil with TLS or
	// Config.Transport).
	stream *transport.TCPStream
	stores *Stores
	closer []io.Closer
	log    *slog.Logger
	// live is raft once NewRaft returned; the candidate resolution
	// (membership_directory.go) reads it, and may run before New returns.
	live atomic.Pointer[raft.Raft]

	notifyCh chan bool
	stop     chan struct{}
	wg       sync.WaitGroup

	stats    applyStats
	batches  batchStats
	announce announcer
	members  members
	ops      opsState
	failover failover
	renewals renewStats
	// leaderRounds and followerRounds share confirmation rounds among
	// ReadIndex reads and renewals (renew.go).
	leaderRounds, followerRounds rounds

	mu           sync.Mutex
	probe        FormatProbe  // guarded by mu
	healthProbe  HealthProbe  // guarded by mu
	confirmProbe ConfirmProbe // guarded by mu
	lead         *leadership  // non-nil while this node leads; guarded by mu
	closed       bool         // guarded by mu
	elected      uint64       // elections won by this node; guarded by mu
	observed     uint64       // leader changes observed; guarded by mu
}

// New opens (or creates) the node's stores, starts Raft and, when the node has
// no Raft state and cfg.Bootstrap is set, bootstraps the cluster with every
// candidate as a voter. Bootstrap of an existing cluster is never attempted.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	n := &Node{
		cfg:          cfg,
		fsm:          fsm.New(),
		log:          cfg.Logger.With("node", cfg.ID, "component", "cluster"),
		notifyCh:     make(chan bool, 16),
		probe:        cfg.FormatProbe,
		healthProbe:  cfg.HealthProbe,
		confirmProbe: cfg.ConfirmProbe,
		stop:         make(chan struct{}),
	}
	if cfg.EventRing > 0 {
		n.fsm.SetEventRing(cfg.EventRing)
	}
	n.failover.kick = make(chan struct{}, 1)
	n.leaderRounds = rounds{run: n.leaderRound, stop: n.stop}
	n.followerRounds = rounds{run: n.followerRound, stop: n.stop}
	if _, ok := n.configured(cfg.ID); !ok {
		return nil, fmt.Errorf("node %q is not among the candidates", cfg.ID)
	}
	stores := cfg.Stores
	if stores == nil {
		s, closer, err := openStores(cfg)
		if err != nil {
			return nil, err
		}
		stores = s
		n.closer = append(n.closer, closer)
	}
	trans := cfg.Transport
	if trans == nil {
		var onDrop func()
		if cfg.FastFailover {
			onDrop = n.connDropped
		}
		opened, err := openTransport(cfg, n.Candidates, n.log, onDrop)
		if err != nil {
			n.closeStores()
			return nil, err
		}
		trans, n.stream = opened.Transport, opened.stream
		if onDrop != nil {
			n.failover.dial = opened.dial
		}
	}
	trans = transport.Safe(trans)
	n.trans = trans
	n.stores = stores

	RaftMetrics() // raft's metrics go to the process's sink from its first figure on
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = cfg.BatchApply
	rc.ParallelLeaderWrite = cfg.ParallelWrite
	rc.NotifyCh = n.notifyCh
	// A server removed from the configuration (peers remove) keeps running
	// as a follower of no cluster, like a node waiting to be added, rather
	// than shutting raft down under a running API.
	rc.ShutdownOnRemove = false
	rc.Logger = raftLogger(cfg)
	if err := raft.ValidateConfig(rc); err != nil {
		n.closeAll()
		return nil, fmt.Errorf("raft config: %w", err)
	}

	has, err := raft.HasExistingState(stores.Logs, stores.Stable, stores.Snapshots)
	if err != nil {
		n.closeAll()
		return nil, fmt.Errorf("inspect raft state: %w", err)
	}
	var sm raft.FSM = restoreTracker{FSM: n.fsm, ops: &n.ops}
	if cfg.beforeApply != nil {
		sm = hookedFSM{FSM: sm, before: cfg.beforeApply}
	}
	r, err := raft.NewRaft(rc, sm, stores.Logs, stores.Stable, stores.Snapshots, trans)
	if err != nil {
		n.closeAll()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.live.Store(r)
	if !has && cfg.Bootstrap {
		var servers []raft.Server
		for _, c := range cfg.Candidates {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(c.Machine), Address: raft.ServerAddress(c.Raft)})
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			_ = r.Shutdown().Error()
			n.closeAll()
			return nil, fmt.Errorf("bootstrap cluster: %w", err)
		}
		n.log.Info("bootstrapped cluster", "candidates", len(servers))
	}
	if !has && !cfg.Bootstrap {
		n.log.Info("no raft state and bootstrap off: waiting to be added to a cluster (peers add)")
	}
	n.wg.Add(1)
	go n.watchLeadership()
	switch {
	case n.failover.dial == nil:
	case cfg.HeartbeatTimeout-time.Millisecond < cfg.LeaderLeaseTimeout:
		// raft refuses a heartbeat timeout below the lease timeout, so
		// there is nothing to shorten.
		n.log.Info("fast failover off: the heartbeat timeout is not above the leader lease timeout",
			"heartbeat_timeout", cfg.HeartbeatTimeout, "leader_lease_timeout", cfg.LeaderLeaseTimeout)
	default:
		n.wg.Add(1)
		go n.watchLeaderConns()
	}
	return n, nil
}

// hookedFSM is the state machine with Config.beforeApply run before each
// entry.
type hookedFSM struct {
	raft.FSM
	before func(*raft.Log)
}

// Apply runs the hook, then applies the entry.
func (h hookedFSM) Apply(l *raft.Log) any {
	h.before(l)
	return h.FSM.Apply(l)
}

func openStores(cfg Config) (*Stores, io.Closer, error) {
	if cfg.DataDir == "" {
		return nil, nil, errors.New("data dir is empty")
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create raft dir: %w", err)
	}
	bolt, err := openBolt(filepath.Join(dir, "raft.db"), cfg.NoFreelistSync)
	if err != nil {
		return nil, nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, raftLogger(cfg))
	if err != nil {
		_ = bolt.Close()
		return nil, nil, fmt.Errorf("open snapshot store: %w", err)
	}
	var logs raft.LogStore = bolt
	if cfg.LogCache > 0 {
		if logs, err = raft.NewLogCache(cfg.LogCache, bolt); err != nil {
			_ = bolt.Close()
			return nil, nil, fmt.Errorf("log cache: %w", err)
		}
	}
	return &Stores{Logs: logs, Stable: bolt, Snapshots: snaps}, bolt, nil
}

// openedTransport is what openTransport returns.
type openedTransport struct {
	raft.Transport
	// dial connects to a peer's Raft address as the transport does: fast
	// failover's probe of the leader (leader_failover.go).
	dial func(addr string, timeout time.Duration) (net.Conn, error)
	// stream is the plaintext transport's stream layer; nil with TLS.
	stream *transport.TCPStream
}

// openTransport opens the TCP transport, or the mutual TLS one when cfg.TLS
// is set; peers returns the current candidates (the TLS transport asks at
// every connection, so a change to the set applies to the next one), and
// onDrop (when set) hears of every inbound connection whose Read or Write
// fails.
func openTransport(cfg Config, peers func() []Candidate, log *slog.Logger, onDrop func()) (openedTransport, error) {
	if cfg.TLS != nil {
		t, err := transport.NewTLS(transport.TLSConfig{
			BindAddr: cfg.BindAddr, Advertise: cfg.Advertise, Certs: cfg.TLS,
			Peers:   func() []transport.Peer { return raftPeers(peers()) },
			Timeout: transportTimeout, Logger: log, HCLog: raftLogger(cfg), OnDrop: onDrop,
		})
		if err != nil {
			return openedTransport{}, err
		}
		return openedTransport{Transport: t, dial: t.Dial}, nil
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
	if err != nil {
		return openedTransport{}, fmt.Errorf("raft advertise address %q: %w", cfg.Advertise, err)
	}
	stream, err := transport.NewTCPStream(cfg.BindAddr, adv, onDrop)
	if err != nil {
		return openedTransport{}, fmt.Errorf("raft transport on %s: %w", cfg.BindAddr, err)
	}
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: transportTimeout, Logger: raftLogger(cfg),
	})
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, timeout)
	}
	return openedTransport{Transport: t, dial: dial, stream: stream}, nil
}

// raftPeers is the transport's view of the candidates: machine and Raft
// address.
func raftPeers(cands []Candidate) []transport.Peer {
	peers := make([]transport.Peer, len(cands))
	for i, c := range cands {
		peers[i] = transport.Peer{Machine: c.Machine, Raft: c.Raft}
	}
	return peers
}

// raftLogger is the hclog.Logger raft writes through for this node
// (transport.RaftLogger).
func raftLogger(cfg Config) hclog.Logger { return transport.RaftLogger(cfg.Logger, cfg.ID) }

// LevelTrace is the slog level of raft's Trace lines, below slog.LevelDebug.
const LevelTrace = transport.LevelTrace

// transportTimeout is the Raft transport's I/O deadline per RPC (scaled up
// for snapshots by raft).
const transportTimeout = 5 * time.Second

func (n *Node) closeStores() {
	for _, c := range n.closer {
		_ = c.Close()
	}
	n.closer = nil
}

func (n *Node) closeAll() {
	if c, ok := n.trans.(io.Closer); ok {
		_ = c.Close()
	}
	n.closeStores()
}

// FSM returns the node's state machine for local reads.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Raft returns the underlying raft instance.
func (n *Node) Raft() *raft.Raft { return n.raft }

// ID returns this node's machine name.
func (n *Node) ID() string { return n.cfg.ID }

// HeartbeatTimeout returns the configured raft heartbeat timeout.
func (n *Node) HeartbeatTimeout() time.Duration { return n.cfg.HeartbeatTimeout }
