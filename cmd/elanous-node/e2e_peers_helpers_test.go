package main

// Helpers of e2e_peers_test.go: running client commands as processes, adding
// a node that waits to be added, and reading the membership as a client does.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// e2eCommand runs the binary with args to completion (within timeout) and
// returns its stdout and stderr.
func e2eCommand(t *testing.T, timeout time.Duration, env []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2eBinary(t), args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("elanous-node %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// candidateFlag is --candidates for nodes: machine=url pairs.
func candidateFlag(nodes ...*e2eNode) string {
	var parts []string
	for _, nd := range nodes {
		parts = append(parts, nd.id+"="+nd.url)
	}
	return strings.Join(parts, ",")
}

// raftTuning returns a config edit that makes the cluster snapshot and
// compact its log often (a new server must then catch up through a snapshot).
func raftTuning(doc map[string]any) {
	r := doc["raft"].(map[string]any)
	r["snapshot_threshold"] = 32
	r["trailing_logs"] = 16
	r["snapshot_interval"] = "250ms"
}

// addWaitingNode adds a node named id to c on free ports, with a copy of the
// tokens file and a config with cluster.bootstrap false whose candidates are
// the running nodes and itself (tune, when set, edits it further), and
// starts it. It waits until the node answers /v1/ready with 503 not-ready:
// it waits to be added.
func (c *e2eCluster) addWaitingNode(id string, tune func(map[string]any)) *e2eNode {
	c.t.Helper()
	ports := freePorts(c.t, 2)
	dir := filepath.Join(filepath.Dir(c.nodes[0].dir), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	nd := &e2eNode{
		id: id, dir: dir, dataDir: dataDir,
		config: filepath.Join(dir, "elanous.yaml"),
		tokens: filepath.Join(dataDir, "control", "tokens.json"),
		url:    fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		raft:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	raw, err := os.ReadFile(c.nodes[0].tokens)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(nd.tokens), 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(nd.tokens, raw, 0o600); err != nil {
		c.t.Fatal(err)
	}
	running := c.running()
	c.nodes = append(c.nodes, nd)
	c.writeConfig(nd, func(doc map[string]any) {
		var cands []map[string]any
		for _, o := range append(running, nd) {
			cands = append(cands, map[string]any{"machine": o.id, "url": o.url, "raft": o.raft})
		}
		doc["cluster"] = map[string]any{"bootstrap": false, "candidates": cands}
		if tune != nil {
			tune(doc)
		}
	})
	c.start(nd)
	testutil.Poll(c.t, id+" waits to be added (503 not-ready)", 10*time.Second, func() error {
		r, err := testutil.Do(e2eCall(http.MethodGet, nd.url+"/v1/ready", "", nil))
		if err != nil {
			return err
		}
		return testutil.CheckError(r, wire.CodeNotReady)
	})
	return nd
}

// peersOf reads GET /v1/cluster/peers?consistent=true through nd.
func (c *e2eCluster) peersOf(nd *e2eNode) ([]wire.Peer, error) {
	r, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/cluster/peers?consistent=true", c.tokens.Query, nil), http.StatusOK)
	if err != nil {
		return nil, err
	}
	var peers []wire.Peer
	if err := json.Unmarshal(r.Body, &peers); err != nil {
		return nil, fmt.Errorf("decode peers %s: %w", r.Body, err)
	}
	return peers, nil
}

// voters returns the machines peers lists as voters, sorted.
func voterNames(peers []wire.Peer) []string {
	var out []string
	for _, p := range peers {
		if p.Suffrage == wire.SuffrageVoter {
			out = append(out, p.Machine)
		}
	}
	slices.Sort(out)
	return out
}

// raftStat returns one of raft's Stats() figures from nd's /v1/cluster/status.
func (c *e2eCluster) raftStat(nd *e2eNode, key string) (uint64, error) {
	st, err := c.getStatus(nd)
	if err != nil {
		return 0, err
	}
	var stats map[string]string
	if err := json.Unmarshal(st.Raft, &stats); err != nil {
		return 0, fmt.Errorf("raft stats %s: %w", st.Raft, err)
	}
	return strconv.ParseUint(stats[key], 10, 64)
}

// leaseOf reads GET /v1/leases/port/{port} through nd.
func (c *e2eCluster) leaseOf(nd *e2eNode, port int) (wire.PortLease, error) {
	return queryGet[wire.PortLease](c, nd, fmt.Sprintf("/v1/leases/port/%d", port))
}

// resourceOf reads GET /v1/resources/{id} through nd.
func (c *e2eCluster) resourceOf(nd *e2eNode, id string) (wire.Resource, error) {
	return queryGet[wire.Resource](c, nd, "/v1/resources/"+member.EscapeID(id))
}
