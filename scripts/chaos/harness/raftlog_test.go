package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func writeLog(t *testing.T, dataDir string, entries ...raft.Log) {
	t.Helper()
	path := RaftLogPath(dataDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ls []*raft.Log
	for i := range entries {
		ls = append(ls, &entries[i])
	}
	if err := s.StoreLogs(ls); err != nil {
		t.Fatal(err)
	}
}

func TestCluster_CompareLogs(t *testing.T) {
	c := newTestCluster(t)
	e := func(i, term uint64, data string) raft.Log {
		return raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(data)}
	}
	writeLog(t, c.Nodes[0].DataDir, e(1, 1, "a"), e(2, 2, "b"), e(3, 2, "c"))
	writeLog(t, c.Nodes[1].DataDir, e(1, 1, "a"), e(2, 2, "b"), e(3, 2, "c"), e(4, 2, "uncommitted"))
	writeLog(t, c.Nodes[2].DataDir, e(2, 2, "b"), e(3, 2, "c")) // index 1 compacted
	if diff, err := c.CompareLogs(3); err != nil || diff != "" {
		t.Errorf("CompareLogs(matching logs) = %q, %v; want no difference", diff, err)
	}
	// The same term at one index with other data: the heartbeat race of
	// hashicorp/raft#695 leaves exactly this behind.
	writeLog(t, c.Nodes[2].DataDir, e(3, 2, "other"))
	diff, err := c.CompareLogs(3)
	if err != nil || !strings.HasPrefix(diff, "index 3:") {
		t.Errorf("CompareLogs(diverged logs) = %q, %v; want a difference at index 3", diff, err)
	}
}
