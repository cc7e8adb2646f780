package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Errors of Recover.
var (
	// ErrNodeRunning is returned when the node's Raft store is locked by
	// another process: the node is running, and must be stopped first.
	ErrNodeRunning = errors.New("the raft store is locked by another process (is the node running? stop it first)")
	// ErrNoRaftState is returned when the data directory holds no Raft
	// state: there is nothing to recover (a fresh server joins with peers add).
	ErrNoRaftState = errors.New("no raft state to recover")
)

// storeLockTimeout bounds the wait for the Raft store's file lock: another
// process holding it (a running node) makes opening fail instead of hang.
const storeLockTimeout = time.Second

// openBolt opens the Raft log and stable store at path (boltdb's map
// freelist, not synced with noFreelistSync); ErrNodeRunning when another
// process holds it.
func openBolt(path string, noFreelistSync bool) (*raftboltdb.BoltStore, error) {
	opts := &bbolt.Options{Timeout: storeLockTimeout, NoFreelistSync: noFreelistSync, FreelistType: bbolt.FreelistMapType}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("open raft log store %s: %w", path, ErrNodeRunning)
	}
	if err != nil {
		return nil, fmt.Errorf("open raft log store %s: %w", path, err)
	}
	return bolt, nil
}

// RecoverConfig configures Recover.
type RecoverConfig struct {
	// ID is this node's machine name; it must be one of Peers.
	ID string
	// DataDir is the node's data directory (its Raft state is under raft/).
	DataDir string
	// Peers are the machines of the new configuration, every one a voter.
	Peers []string
	// Candidates are the configured candidates: the Raft address of a peer
	// the recovered state does not know.
	Candidates []Candidate
	// Logger receives raft's lines; default: discard.
	Logger *slog.Logger
}

// RecoverResult describes a recovered node.
type RecoverResult struct {
	// Servers is the new Raft configuration.
	Servers []Candidate
	// Index and Term are those of the last log entry kept (the recovered
	// snapshot's).
	Index, Term uint64
	// AppliedIndex and StateHash are the recovered state machine's: its last
	// applied command and the SHA-256 of its state.
	AppliedIndex uint64
	StateHash    string
	// Counts sums the recovered state's tables.
	Counts fsm.Counts
}

// Recover rewrites the Raft configuration of a stopped node after its
// cluster lost its quorum, with raft.RecoverCluster: the latest snapshot is
// restored, every entry of the log after it is applied (committed or not:
// the survivor's log is the best copy left), a new snapshot is written that
// carries the new configuration (cfg.Peers, all voters) and the log is
// compacted. Started again, the node forms a cluster of those peers alone;
// fresh servers then join with peers add.
//
// A peer's Raft address comes from the recovered candidate directory, else
// the last Raft configuration in the state, else cfg.Candidates. It fails
// with ErrNodeRunning when the store is locked by a running node and with
// ErrNoRaftState when there is nothing to recover; nothing is changed then.
func Recover(cfg RecoverConfig) (RecoverResult, error) {
	if len(cfg.Peers) == 0 {
		return RecoverResult{}, errors.New("recover: no peers given")
	}
	if !slices.Contains(cfg.Peers, cfg.ID) {
		return RecoverResult{}, fmt.Errorf("recover: the peers %s must include this node, %s", strings.Join(cfg.Peers, ","), cfg.ID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil {
		return RecoverResult{}, fmt.Errorf("recover %s: %w (%v)", cfg.DataDir, ErrNoRaftState, err)
	}
	bolt, err := openBolt(filepath.Join(dir, "raft.db"), false)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %w", err)
	}
	defer bolt.Close()
	logger := raftLogger(Config{ID: cfg.ID, Logger: cfg.Logger})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: open snapshot store: %w", err)
	}
	has, err := raft.HasExistingState(bolt, bolt, snaps)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: inspect raft state: %w", err)
	}
	if !has {
		return RecoverResult{}, fmt.Errorf("recover %s: %w", cfg.DataDir, ErrNoRaftState)
	}

	// First pass, read-only: what the state knows of the peers' addresses.
	known, err := knownAddresses(bolt, snaps)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: read the state: %w", err)
	}
	for _, c := range cfg.Candidates {
		if _, ok := known[c.Machine]; !ok && c.Raft != "" {
			known[c.Machine] = c.Raft
		}
	}
	var configuration raft.Configuration
	var servers []Candidate
	for _, p := range cfg.Peers {
		addr, ok := known[p]
		if !ok {
			return RecoverResult{}, fmt.Errorf("recover: no raft address is known for %s (not in the state's directory or configuration, nor in cluster.candidates)", p)
		}
		configuration.Servers = append(configuration.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p), Address: raft.ServerAddress(addr)})
		servers = append(servers, Candidate{Machine: p, Raft: addr})
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = logger
	_, trans := raft.NewInmemTransport(raft.ServerAddress("recover"))
	defer trans.Close()
	state := fsm.New()
	if err := raft.RecoverCluster(rc, state, bolt, bolt, snaps, trans, configuration); err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %w", err)
	}
	res := RecoverResult{Servers: servers, Counts: state.Counts()}
	res.AppliedIndex, res.StateHash = state.AppliedHash()
	if list, err := snaps.List(); err == nil && len(list) > 0 {
		res.Index, res.Term = list[0].Index, list[0].Term
	}
	return res, nil
}

// knownAddresses replays the node's state into a scratch state machine and
// returns the Raft address of every machine it knows: the candidate
// directory's entries, overridden by the latest Raft configuration's servers
// (the addresses Raft dialled).
func knownAddresses(logs raft.LogStore, snaps raft.SnapshotStore) (map[string]string, error) {
	state := fsm.New()
	var config raft.Configuration
	var from uint64
	list, err := snaps.List()
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	for _, meta := range list {
		_, rc, err := snaps.Open(meta.ID)
		if err != nil {
			continue
		}
		err = state.Restore(rc) // closes rc
		if err != nil {
			continue
		}
		config, from = meta.Configuration, meta.Index
		break
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("last log index: %w", err)
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("first log index: %w", err)
	}
	for i := max(from+1, first); i <= last && i > 0; i++ {
		var entry raft.Log
		if err := logs.GetLog(i, &entry); err != nil {
			return nil, fmt.Errorf("log entry %d: %w", i, err)
		}
		switch entry.Type {
		case raft.LogCommand:
			_ = state.Apply(&entry)
		case raft.LogConfiguration:
			config = raft.DecodeConfiguration(entry.Data)
		}
	}
	known := map[string]string{}
	for _, c := range state.Candidates() {
		known[c.Machine] = c.Raft
	}
	for _, s := range config.Servers {
		known[string(s.ID)] = string(s.Address)
	}
	return known, nil
}
