package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// AnnounceCommit tells the follower that forwarded a write the commit index
// directly: it applies the write long before raft's own commit timeout would
// tell it, and no barrier entry is appended.
func TestAnnounceCommit_TellsTheFollower(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) {
		c.CommitTimeout = time.Minute // followers learn a commit only from the next entry
		c.SweepInterval = time.Hour
	})
	li, leader := tc.leader()
	fi := (li + 1) % 3
	follower := tc.nodes[fi]
	res := mustPropose(t, leader, register("m1", 60_000))
	// The follower holds the entry (it may not know it is committed).
	testutil.WaitFor(t, "the follower holds the entry", 5*time.Second, func() bool {
		return follower.Raft().LastIndex() >= res.Index
	})
	barriers, told := leader.Announcements(), leader.DirectAnnouncements()
	leader.AnnounceCommit(follower.ID())
	testutil.WaitFor(t, "the follower applies the write", 5*time.Second, func() bool {
		return follower.FSM().AppliedIndex() >= res.Index
	})
	testutil.WaitFor(t, "the announcement counted", 5*time.Second, func() bool {
		return leader.DirectAnnouncements() > told
	})
	if got := leader.Announcements(); got != barriers {
		t.Errorf("barriers appended = %d, want %d (the follower was told directly)", got, barriers)
	}
}

// A follower that cannot be told directly (here: unreachable) gets the
// commit with the next entry: AnnounceCommit falls back to a barrier. An
// attempt during which leadership moved, or another entry was appended (it
// carries the commit, so no barrier is due), is made again, up to three
// times.
func TestAnnounceCommit_FallsBackToABarrier(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, c *Config) {
		c.CommitTimeout = time.Minute
		c.SweepInterval = time.Hour
	})
	var leader *Node
	var barriers, told uint64
	for attempt := 1; ; attempt++ {
		li := tc.readyLeader()
		leader = tc.nodes[li]
		fi := (li + 1) % 3
		tc.waitFormat(li, fsm.MaxFormat)
		mustPropose(t, leader, register("m1", 60_000))
		tc.isolate(fi)
		barriers, told = leader.Announcements(), leader.DirectAnnouncements()
		term, before := leader.Raft().CurrentTerm(), leader.Raft().LastIndex()
		leader.AnnounceCommit(tc.nodes[fi].ID())
		ok := testutil.Within(5*time.Second, func() bool {
			return leader.Announcements() > barriers && leader.Raft().LastIndex() > before
		})
		if ok {
			break
		}
		moved := !leader.IsLeader() || leader.Raft().CurrentTerm() != term
		var entries []string
		for idx := before + 1; idx <= leader.Raft().LastIndex(); idx++ {
			var e raft.Log
			if tc.stores[li].Logs.GetLog(idx, &e) == nil {
				entries = append(entries, fmt.Sprintf("%d %v %.80s", idx, e.Type, e.Data))
			}
		}
		if !moved && len(entries) == 0 || attempt == 3 {
			t.Fatalf("attempt %d: no barrier within 5s (leadership moved %v; entries after %d: %v)", attempt, moved, before, entries)
		}
		t.Logf("attempt %d: no barrier, and none due: leadership moved %v; entries after %d: %v", attempt, moved, before, entries)
		tc.heal()
	}
	defer tc.heal()
	if got := leader.DirectAnnouncements(); got != told {
		t.Errorf("direct announcements = %d, want %d (the follower is unreachable)", got, told)
	}
	want := map[string]uint64{"barrier": leader.Announcements(), "direct": leader.DirectAnnouncements()}
	for _, m := range gather(t, leader.Collector())["elanous_commit_announcements_total"].GetMetric() {
		via := m.GetLabel()[0].GetValue()
		if got := m.GetCounter().GetValue(); got != float64(want[via]) {
			t.Errorf("elanous_commit_announcements_total{via=%q} = %v, want %d", via, got, want[via])
		}
		delete(want, via)
	}
	if len(want) != 0 {
		t.Errorf("elanous_commit_announcements_total lacks the series %v", want)
	}
}
