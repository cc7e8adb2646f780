package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather registers cs on a fresh registry and returns the families by name.
func gather(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestNode_Collector(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := leader.Propose(ctx, acquire("o1", 60_000)); err != nil {
		t.Fatalf("Propose() error = %v", err)
	}
	fi := (li + 1) % 3
	follower := tc.nodes[fi]
	testutil.WaitFor(t, "the follower to hear from the leader", 5*time.Second, func() bool {
		return !follower.Raft().LastContact().IsZero()
	})

	lm := gather(t, leader.Collector())
	if got := lm["elanous_propose_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got < 1 {
		t.Errorf("leader elanous_propose_duration_seconds count = %d, want >= 1", got)
	}
	if _, ok := lm["elanous_raft_last_contact_seconds"]; ok {
		t.Error("leader exports elanous_raft_last_contact_seconds, want it absent on the leader")
	}
	if mf, ok := lm["elanous_sweep_overdue_seconds"]; !ok {
		t.Error("leader does not export elanous_sweep_overdue_seconds")
	} else if v := mf.GetMetric()[0].GetGauge().GetValue(); v < 0 {
		t.Errorf("leader elanous_sweep_overdue_seconds = %v, want >= 0", v)
	}
	for name, want := range map[string]float64{
		"elanous_raft_voters": 3, "elanous_raft_voter": 1, "elanous_raft_leader": 1, "elanous_ready": 1,
		"elanous_port_leases": 1, "elanous_resources": 0, "elanous_member_tokens": 0,
	} {
		if got := lm[name].GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("leader %s = %v, want %v", name, got, want)
		}
	}
	term := float64(leader.Raft().CurrentTerm())
	for name, want := range map[string]float64{"elanous_raft_term": term, "elanous_generation": term} {
		if got := lm[name].GetMetric()[0].GetGauge().GetValue(); got != want {
			t.Errorf("leader %s = %v, want the term %v", name, got, want)
		}
	}
	for _, name := range []string{"elanous_raft_commit_index", "elanous_raft_applied_index", "elanous_raft_last_index"} {
		if got := lm[name].GetMetric()[0].GetGauge().GetValue(); got < 1 {
			t.Errorf("leader %s = %v, want >= 1 after a write", name, got)
		}
	}
	if mf := lm["elanous_raft_leader_changes_total"]; mf.GetType() != dto.MetricType_COUNTER || mf.GetMetric()[0].GetCounter().GetValue() < 1 {
		t.Errorf("leader elanous_raft_leader_changes_total = %v, want a counter >= 1", mf)
	}

	fm := gather(t, follower.Collector())
	if mf, ok := fm["elanous_raft_last_contact_seconds"]; !ok {
		t.Error("follower does not export elanous_raft_last_contact_seconds")
	} else if v := mf.GetMetric()[0].GetGauge().GetValue(); v < 0 {
		t.Errorf("follower elanous_raft_last_contact_seconds = %v, want >= 0", v)
	}
	if _, ok := fm["elanous_sweep_overdue_seconds"]; ok {
		t.Error("follower exports elanous_sweep_overdue_seconds, want it absent (only the leader sweeps)")
	}
	if got := fm["elanous_raft_leader"].GetMetric()[0].GetGauge().GetValue(); got != 0 {
		t.Errorf("follower elanous_raft_leader = %v, want 0", got)
	}
	if got := fm["elanous_propose_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 0 {
		t.Errorf("follower elanous_propose_duration_seconds count = %d, want 0", got)
	}
}

func TestNode_CollectorNeverHeardFromLeader(t *testing.T) {
	// One candidate of three whose peers do not exist: it never hears from a leader.
	addr, tr := raft.NewInmemTransport("")
	cands := []Candidate{{Machine: "node-a", Raft: string(addr)}, {Machine: "node-b", Raft: "nowhere-b"}, {Machine: "node-c", Raft: "nowhere-c"}}
	store := raft.NewInmemStore()
	cfg := fastConfig("node-a", cands)
	cfg.Stores = &Stores{Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()}
	cfg.Transport = tr
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	testutil.WaitFor(t, "an election", 5*time.Second, func() bool { return n.Raft().State() == raft.Candidate })
	mfs := gather(t, n.Collector())
	for _, name := range []string{"elanous_raft_last_contact_seconds", "elanous_sweep_overdue_seconds"} {
		if mf, ok := mfs[name]; ok {
			t.Errorf("a node that never heard from a leader exports %s = %v, want it absent", name, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

func TestRaftMetrics_SharedByNodesOfOneProcess(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li := tc.readyLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := tc.nodes[li].Propose(ctx, acquire("o1", 60_000)); err != nil {
		t.Fatalf("Propose() error = %v", err)
	}
	// Every node's registry takes the process-wide collector without a
	// clash, and raft's figures are there.
	var mfs map[string]*dto.MetricFamily
	for _, n := range tc.nodes {
		mfs = gather(t, n.Collector(), RaftMetrics())
	}
	for _, name := range []string{"raft_commitTime", "raft_fsm_apply", "raft_replication_appendEntries_rpc"} {
		if _, ok := mfs[name]; !ok {
			t.Errorf("raft metrics lack %s", name)
		}
	}
	peers := map[string]bool{}
	for _, m := range mfs["raft_replication_appendEntries_rpc"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "peer_id" {
				peers[l.GetValue()] = true
			}
		}
	}
	for i, n := range tc.nodes {
		if i != li && !peers[n.ID()] {
			t.Errorf("raft_replication_appendEntries_rpc has no series for follower %s (peers %v)", n.ID(), peers)
		}
	}
	for name := range mfs {
		if strings.HasPrefix(name, "raft_replication_appendEntries_rpc_") {
			t.Errorf("raft's legacy per-peer series %s is exported, want only the peer_id-labelled one", name)
		}
	}
}
