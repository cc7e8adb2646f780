package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// clusterStatus reads GET /v1/cluster/status on node i with the member token.
func (s *elanousSystem) clusterStatus(ctx context.Context, i int) (wire.ClusterStatus, error) {
	return testcluster.Status(ctx, s.status, s.nodes[i].url, s.token)
}

// raftStat returns the raft statistic key (hashicorp/raft's Stats, in the
// cluster status's raft object) as an unsigned integer.
func raftStat(st wire.ClusterStatus, key string) (uint64, bool) {
	var m map[string]string
	if len(st.Raft) == 0 || json.Unmarshal(st.Raft, &m) != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(m[key], 10, 64)
	return v, err == nil
}

// metrics reads node i's /metrics (unauthenticated unless the node sets
// http.metrics_auth, so the member token is sent too).
func (s *elanousSystem) metrics(ctx context.Context, i int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return testcluster.Metrics(ctx, s.status, s.nodes[i].url, s.token)
}

// metricValue returns the value of the unlabelled counter or gauge name in a
// Prometheus text exposition; ok is false when it is absent.
func metricValue(text, name string) (float64, bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return 0, false, fmt.Errorf("parse metrics: %w", err)
	}
	f, ok := fams[name]
	if !ok {
		return 0, false, nil
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) > 0 {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true, nil
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true, nil
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true, nil
		}
	}
	return 0, false, nil
}

// snapshotSpan is one snapshot a node took, from hashicorp/raft's log lines
// "starting snapshot up to" and "snapshot complete up to" (the time to
// create, persist and close the snapshot and compact the log; the state
// machine's copy is taken just before the first line).
type snapshotSpan struct {
	Node       string    `json:"node"`
	Index      uint64    `json:"index"`
	Started    time.Time `json:"started"`
	Completed  time.Time `json:"completed"`
	DurationMs float64   `json:"durationMs"`
}

// Log messages of hashicorp/raft's takeSnapshot.
const (
	msgSnapshotStart    = "starting snapshot up to"
	msgSnapshotComplete = "snapshot complete up to"
)

// parseSnapshotSpans reads a node's log (the text or JSON lines of log/slog:
// time, msg and raft's index attribute) and pairs each snapshot's start with
// its completion by index. A start with no completion (a failed snapshot, or
// one still running) is left out; lines that are not the node's (the
// driver's "=== compare-etcd" lines) are skipped.
func parseSnapshotSpans(node string, r io.Reader) ([]snapshotSpan, error) {
	started := map[uint64]time.Time{}
	var out []snapshotSpan
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		isStart := strings.Contains(line, msgSnapshotStart)
		if !isStart && !strings.Contains(line, msgSnapshotComplete) {
			continue
		}
		at, index, ok := logTimeAndIndex(line)
		if !ok {
			continue
		}
		if isStart {
			started[index] = at
			continue
		}
		if t0, ok := started[index]; ok {
			out = append(out, snapshotSpan{Node: node, Index: index, Started: t0, Completed: at, DurationMs: ms(at.Sub(t0))})
			delete(started, index)
		}
	}
	return out, sc.Err()
}

// logTimeAndIndex reads the time and index attributes of one slog line, JSON
// ({"time":"…",…,"index":N}) or text (time=… … index=N).
func logTimeAndIndex(line string) (time.Time, uint64, bool) {
	var timeText, indexText string
	if strings.HasPrefix(line, "{") {
		var rec struct {
			Time  string          `json:"time"`
			Index json.RawMessage `json:"index"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			return time.Time{}, 0, false
		}
		timeText, indexText = rec.Time, string(rec.Index)
	} else {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "time="); ok {
				timeText = v
			} else if v, ok := strings.CutPrefix(f, "index="); ok {
				indexText = v
			}
		}
	}
	at, err := time.Parse(time.RFC3339Nano, timeText)
	if err != nil {
		return time.Time{}, 0, false
	}
	index, err := strconv.ParseUint(strings.Trim(indexText, `"`), 10, 64)
	if err != nil {
		return time.Time{}, 0, false
	}
	return at, index, true
}

// snapshotsSince returns the snapshots every node started at or after since
// (and completed), in log order per node.
func (s *elanousSystem) snapshotsSince(since time.Time) ([]snapshotSpan, error) {
	var out []snapshotSpan
	for _, n := range s.nodes {
		f, err := os.Open(n.logPath)
		if err != nil {
			return nil, err
		}
		spans, err := parseSnapshotSpans(n.name, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s's log: %w", n.name, err)
		}
		for _, sp := range spans {
			if !sp.Started.Before(since) {
				out = append(out, sp)
			}
		}
	}
	return out, nil
}

// retainedSnapshots counts the snapshot directories in node i's
// raft/snapshots (hashicorp/raft keeps the last few).
func (s *elanousSystem) retainedSnapshots(i int) int {
	entries, err := os.ReadDir(s.nodes[i].snapshotsDir())
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			n++
		}
	}
	return n
}

func (n *elanousNode) snapshotsDir() string { return filepath.Join(n.dataDir, "raft", "snapshots") }
