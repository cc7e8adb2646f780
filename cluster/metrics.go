package cluster

import (
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprometheus "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// applyStats are the node's proposal figures. The zero value is ready: the
// metrics are made on first use.
type applyStats struct {
	once     sync.Once
	duration prometheus.Histogram
	failures prometheus.Counter
}

func (s *applyStats) init() {
	s.once.Do(func() {
		s.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "elanous_propose_duration_seconds",
			Help: "Time from handing a command to Raft until this node applied it, for commands Raft committed.",
			// A commit on a LAN takes about a millisecond; a proposal gives up at 10 s.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		})
		s.failures = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elanous_propose_failures_total",
			Help: "Commands Raft refused or lost (not leader, leadership lost, shutdown, timeout).",
		})
	})
}

// observeApply records one proposal that Raft answered after d: its latency
// when it committed, a failure otherwise.
func (n *Node) observeApply(d time.Duration, err error) {
	n.stats.init()
	if err != nil {
		n.stats.failures.Inc()
		return
	}
	n.stats.duration.Observe(d.Seconds())
}

// newDesc describes one of the node's figures, with the variable labels given.
func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descTerm         = newDesc("elanous_raft_term", "Current Raft term.")
	descCommitIndex  = newDesc("elanous_raft_commit_index", "Raft commit index.")
	descAppliedIndex = newDesc("elanous_raft_applied_index",
		"Index of the last command the state machine applied.")
	descLastIndex     = newDesc("elanous_raft_last_index", "Last index in the Raft log.")
	descLeader        = newDesc("elanous_raft_leader", "1 when this node is the Raft leader.")
	descLeaderChanges = newDesc("elanous_raft_leader_changes_total",
		"Leadership changes this node observed.")
	descReady = newDesc("elanous_ready",
		"1 when this node serves (leader known, its claim applied here).")
	descGeneration = newDesc("elanous_generation",
		"Generation (leader term) of the applied primary claim.")
	descResources    = newDesc("elanous_resources", "Registered resources.")
	descPortLeases   = newDesc("elanous_port_leases", "Port leases held.")
	descMemberTokens = newDesc("elanous_member_tokens", "Machine tokens issued.")
	descLastContact  = newDesc("elanous_raft_last_contact_seconds",
		"Seconds since this follower last heard from a leader; absent on the leader and on a node that never heard from one.")
	descSweepOverdue = newDesc("elanous_sweep_overdue_seconds",
		"On the leader once its claim is applied: how long the earliest TTL is past due and not yet swept (0 when none is); absent elsewhere.")
	descVoters = newDesc("elanous_raft_voters",
		"Voters in the Raft configuration as this node knows it.")
	descVoter = newDesc("elanous_raft_voter",
		"1 when this node is a voter in the Raft configuration it knows.")
	descRenewals = newDesc("elanous_renewals_total",
		"Heartbeats and lease renewals this node judged, by outcome: covered (answered from confirmed state, no log entry), written (proposed with slack), refused (refused from confirmed state) or forwarded (a follower sent it to the leader).",
		"outcome")
	descConfirmRounds = newDesc("elanous_confirm_rounds_total",
		"Confirmation rounds this node ran, shared by every renewal and consistent read waiting on one: side leader (a quorum's confirmation) or follower (a request to the leader).",
		"side")
	descBatches = newDesc("elanous_batches_total",
		"Batch entries this node proposed as leader (group commit: concurrent writes that left as one entry).")
	descBatchedCommands = newDesc("elanous_batched_commands_total",
		"Commands carried by the batch entries of elanous_batches_total.")
	descAnnouncements = newDesc("elanous_commit_announcements_total",
		"Commit index announcements this node made as leader so a follower applies a forwarded write sooner, by how: direct (told to the follower, which accepted) or barrier (a barrier entry appended, the fallback).",
		"via")
)

// Collector returns the node's own Prometheus figures, the one collector of
// its raft view and replicated state: elanous_raft_term,
// elanous_raft_commit_index, elanous_raft_applied_index,
// elanous_raft_last_index, elanous_raft_leader,
// elanous_raft_leader_changes_total, elanous_ready, elanous_generation,
// elanous_resources, elanous_port_leases, elanous_member_tokens,
// elanous_propose_duration_seconds (histogram), elanous_propose_failures_total,
// elanous_raft_last_contact_seconds, elanous_sweep_overdue_seconds,
// elanous_raft_voters, elanous_raft_voter, elanous_renewals_total,
// elanous_confirm_rounds_total, elanous_batches_total,
// elanous_batched_commands_total and elanous_commit_announcements_total.
// A figure that does not apply
// to this node now (last contact on the leader, sweep lateness on a
// follower) is absent, never a sentinel value. Register it on one registry
// per node; raft's own metrics come from RaftMetrics.
func (n *Node) Collector() prometheus.Collector {
	n.stats.init()
	return nodeCollector{n}
}

type nodeCollector struct{ n *Node }

// Describe sends every descriptor the collector may use.
func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTerm, descCommitIndex, descAppliedIndex, descLastIndex, descLeader,
		descLeaderChanges, descReady, descGeneration, descResources, descPortLeases, descMemberTokens} {
		ch <- d
	}
	ch <- c.n.stats.duration.Desc()
	ch <- c.n.stats.failures.Desc()
	ch <- descLastContact
	ch <- descSweepOverdue
	ch <- descVoters
	ch <- descVoter
	ch <- descRenewals
	ch <- descConfirmRounds
	ch <- descBatches
	ch <- descBatchedCommands
	ch <- descAnnouncements
}

// Collect sends the figures that apply now.
func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descTerm, float64(n.raft.CurrentTerm()))
	gauge(descCommitIndex, float64(n.raft.CommitIndex()))
	gauge(descAppliedIndex, float64(n.fsm.AppliedIndex()))
	gauge(descLastIndex, float64(n.raft.LastIndex()))
	gauge(descLeader, b2f(n.IsLeader()))
	observed, _ := n.LeaderChanges()
	ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, float64(observed))
	gauge(descReady, b2f(n.Ready()))
	gauge(descGeneration, float64(n.fsm.Primary().Generation))
	counts := n.fsm.Counts()
	gauge(descResources, float64(counts.Resources))
	gauge(descPortLeases, float64(counts.Leases))
	gauge(descMemberTokens, float64(counts.Tokens))
	ch <- n.stats.duration
	ch <- n.stats.failures
	if !n.IsLeader() {
		if last := n.raft.LastContact(); !last.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLastContact, prometheus.GaugeValue, time.Since(last).Seconds())
		}
	}
	if late, ok := n.sweepOverdue(); ok {
		ch <- prometheus.MustNewConstMetric(descSweepOverdue, prometheus.GaugeValue, late.Seconds())
	}
	voters, self := 0, 0.0
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			if string(s.ID) == n.cfg.ID {
				self = 1
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descVoters, prometheus.GaugeValue, float64(voters))
	ch <- prometheus.MustNewConstMetric(descVoter, prometheus.GaugeValue, self)
	for i, name := range renewOutcomeNames {
		ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(n.renewals.outcomes[i].Load()), name)
	}
	ch <- prometheus.MustNewConstMetric(descConfirmRounds, prometheus.CounterValue, float64(n.renewals.leaderRounds.Load()), "leader")
	ch <- prometheus.MustNewConstMetric(descConfirmRounds, prometheus.CounterValue, float64(n.renewals.followerRounds.Load()), "follower")
	batches, commands := n.batches.read()
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(batches))
	ch <- prometheus.MustNewConstMetric(descBatchedCommands, prometheus.CounterValue, float64(commands))
	direct, barriers := n.announce.counts()
	ch <- prometheus.MustNewConstMetric(descAnnouncements, prometheus.CounterValue, float64(direct), "direct")
	ch <- prometheus.MustNewConstMetric(descAnnouncements, prometheus.CounterValue, float64(barriers), "barrier")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sweepOverdue reports, on a leader whose claim is applied, how long the
// earliest expiry is past due in cluster time (0 when nothing is due). The
// leader sweeps at each due expiry, so a lateness that keeps growing means
// its sweeps fail. ok is false on any other node.
func (n *Node) sweepOverdue() (late time.Duration, ok bool) {
	n.mu.Lock()
	l := n.lead
	n.mu.Unlock()
	if l == nil || !l.isReady() {
		return 0, false
	}
	next, live := n.fsm.NextExpiry()
	if !live {
		return 0, true
	}
	return max(0, time.Duration(l.now()-next)*time.Millisecond), true
}

// raftSink is the process's hashicorp/go-metrics sink. go-metrics keeps one
// global sink that every raft instance in the process writes to, so it is
// installed once, whatever the number of nodes (dev runs three).
var raftSink struct {
	once sync.Once
	sink *gmprometheus.PrometheusSink
}

// RaftMetrics returns raft's own metrics as a Prometheus collector: the
// hashicorp/go-metrics Prometheus sink, installed on first call as
// go-metrics' global sink (raft and raft-boltdb write only there). Names are
// raft's keys joined by "_" (raft.commitTime is raft_commitTime); timings
// are summaries in milliseconds, as raft measures them. Per-follower
// replication series carry a peer_id label; raft's older copies of them with
// the peer in the name are dropped. Series not updated for a minute are
// removed (a former leader's replication series, for instance).
//
// The sink belongs to the process, not to a node: where several nodes run in
// one process (dev, tests) every node's registry shows their combined
// figures. Registering the collector on any number of registries is safe;
// it is never registered on prometheus' global registry.
func RaftMetrics() prometheus.Collector {
	raftSink.once.Do(func() {
		// NewPrometheusSinkFrom fails only when its Registerer refuses the
		// sink; discardRegisterer never does, and keeps the sink off
		// prometheus' global registry.
		sink, _ := gmprometheus.NewPrometheusSinkFrom(gmprometheus.PrometheusOpts{
			Expiration: time.Minute,
			Name:       "elanous_raft_metrics_sink",
			Registerer: discardRegisterer{},
		})
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false
		conf.EnableServiceLabel = false
		conf.BlockedPrefixes = []string{
			"raft.replication.appendEntries.rpc.",
			"raft.replication.appendEntries.logs.",
			"raft.replication.heartbeat.",
			"raft.replication.installSnapshot.",
		}
		_, _ = gometrics.NewGlobal(conf, sink) // go-metrics' New returns no error
		raftSink.sink = sink
	})
	return raftSink.sink
}

// discardRegisterer accepts every collector and keeps none.
type discardRegisterer struct{}

func (discardRegisterer) Register(prometheus.Collector) error  { return nil }
func (discardRegisterer) MustRegister(...prometheus.Collector) {}
func (discardRegisterer) Unregister(prometheus.Collector) bool { return false }
