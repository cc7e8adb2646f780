package harness

// What the nodes say: their status and metrics over the HTTP API, the
// leader, convergence, and the panics in their logs.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
	"github.com/elanous/elanous-node/wire"
)

// Status reads node i's /v1/cluster/status.
func (c *Cluster) Status(ctx context.Context, i int) (wire.ClusterStatus, error) {
	st, err := testcluster.Status(ctx, c.client, c.Nodes[i].URL, c.Tokens.Query)
	if err != nil {
		return st, fmt.Errorf("%s: %w", c.Nodes[i].Name, err)
	}
	return st, nil
}

// Metrics reads node i's /metrics (Prometheus text) with the query token.
func (c *Cluster) Metrics(ctx context.Context, i int) (string, error) {
	text, err := testcluster.Metrics(ctx, c.client, c.Nodes[i].URL, c.Tokens.Query)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.Nodes[i].Name, err)
	}
	return text, nil
}

// Statuses reads every node's status concurrently, each bounded by a
// second; a node that did not answer has a nil entry.
func (c *Cluster) Statuses(ctx context.Context) []*wire.ClusterStatus {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	return testcluster.Statuses(ctx, c.client, urls, c.Tokens.Query)
}

// Leader returns the index of the node that says it leads (the highest term
// among those that do) and is ready, or -1.
func (c *Cluster) Leader(ctx context.Context) int { return testcluster.Leader(c.Statuses(ctx)) }

// WaitLeader polls until a ready leader is known, other than any in not.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration, not ...int) (int, error) {
	l := -1
	err := testcluster.WaitFor(ctx, "a ready leader", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		sts := c.Statuses(ctx)
		if l = testcluster.Leader(sts); l < 0 || slices.Contains(not, l) {
			return fmt.Errorf("none other than %v: %s", not, describe(c, sts))
		}
		return nil
	})
	if err != nil {
		return -1, err
	}
	return l, nil
}

// ErrDiverged is returned by WaitConverged when nodes keep reporting different
// state hashes at one applied index.
var ErrDiverged = errors.New("state diverged")

// WaitConverged polls until every node answers with the same applied index
// and state hash. Nodes that report one applied index with different hashes
// in three polls in a row fail with ErrDiverged (a single such poll can be a
// status read racing an apply).
func (c *Cluster) WaitConverged(ctx context.Context, timeout time.Duration) ([]*wire.ClusterStatus, error) {
	var last []*wire.ClusterStatus
	mismatches := 0
	err := testcluster.WaitFor(ctx, "the nodes to converge", timeout, 150*time.Millisecond, func(ctx context.Context) error {
		sts := c.Statuses(ctx)
		last = sts
		byIndex := map[uint64]string{}
		same, mismatch := true, ""
		for i, st := range sts {
			if st == nil {
				same = false
				continue
			}
			if h, ok := byIndex[st.AppliedIndex]; ok && h != st.StateHash {
				mismatch = fmt.Sprintf("%s has hash %s at index %d, another node %s", c.Nodes[i].Name, st.StateHash, st.AppliedIndex, h)
			}
			byIndex[st.AppliedIndex] = st.StateHash
			if sts[0] == nil || st.AppliedIndex != sts[0].AppliedIndex || st.StateHash == "" {
				same = false
			}
		}
		if mismatch != "" {
			if mismatches++; mismatches >= 3 {
				return testcluster.Final(fmt.Errorf("%w: %s", ErrDiverged, mismatch))
			}
			return errors.New(mismatch)
		}
		mismatches = 0
		if !same {
			return errors.New(describe(c, sts))
		}
		return nil
	})
	return last, err
}

func describe(c *Cluster, sts []*wire.ClusterStatus) string {
	var parts []string
	for i, st := range sts {
		if st == nil {
			parts = append(parts, c.Nodes[i].Name+"=unreachable")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s/t%d/applied%d/%s", c.Nodes[i].Name, st.State, st.Term, st.AppliedIndex, short(st.StateHash)))
	}
	return strings.Join(parts, " ")
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// PanicLines returns the lines of every node log that show a panic or a
// fatal runtime error.
func (c *Cluster) PanicLines() []string {
	var out []string
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.Contains(line, "DATA RACE") {
				out = append(out, n.Name+": "+line)
			}
		}
	}
	return out
}
