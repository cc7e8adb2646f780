package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// RaftLogPath is where a node keeps its Raft log store, under its data dir.
func RaftLogPath(dataDir string) string { return filepath.Join(dataDir, "raft", "raft.db") }

// CompareLogs checks Raft's Log Matching property on stopped nodes: every
// node's log store must hold the same entry (term and data) at every index up
// to upTo that two or more of them still hold (snapshots compact the start).
// It returns a description of the first difference, or "".
func (c *Cluster) CompareLogs(upTo uint64) (string, error) {
	type store struct {
		name string
		s    *raftboltdb.BoltStore
	}
	var stores []store
	defer func() {
		for _, st := range stores {
			st.s.Close()
		}
	}()
	for _, n := range c.Nodes {
		path := RaftLogPath(n.DataDir)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		s, err := raftboltdb.New(raftboltdb.Options{Path: path,
			BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second}})
		if err != nil {
			return "", fmt.Errorf("open %s: %w", path, err)
		}
		stores = append(stores, store{n.Name, s})
	}
	for idx := uint64(1); idx <= upTo; idx++ {
		var ref *raft.Log
		var refName string
		for _, st := range stores {
			var l raft.Log
			if err := st.s.GetLog(idx, &l); err != nil {
				continue // compacted into a snapshot, or not written here
			}
			if ref == nil {
				ref, refName = &l, st.name
				continue
			}
			if l.Term != ref.Term || l.Type != ref.Type || !bytes.Equal(l.Data, ref.Data) {
				return fmt.Sprintf("index %d: %s has term %d %s, %s has term %d %s", idx,
					refName, ref.Term, clip(ref.Data), st.name, l.Term, clip(l.Data)), nil
			}
		}
	}
	return "", nil
}

func clip(b []byte) string {
	if len(b) > 160 {
		b = b[:160]
	}
	return fmt.Sprintf("%q", b)
}
