package cluster

import (
	"sync/atomic"
	"testing"
	"time"
)

// A new leader whose wall clock is far ahead of or behind the old leader's
// rebases every record onto its own clock: each keeps exactly the TTL it had
// left when the previous term ended, plus the grace. Nothing expires early
// because the clock runs ahead, and nothing lives longer because it runs
// behind.
func TestNode_ClaimRebasesOntoASkewedClock(t *testing.T) {
	for _, tt := range []struct {
		name string
		skew time.Duration
	}{
		{"an hour ahead", time.Hour},
		{"an hour behind", -time.Hour},
		{"a year ahead", 365 * 24 * time.Hour},
		{"a year behind", -365 * 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each subtest waits out two elections of its own cluster
			// Each node's wall clock is the system clock plus its offset; a
			// node reads it once per election won.
			offsets := make([]atomic.Int64, 3)
			gate := newClaimGate(false) // it only notes when the new leader's claim reaches its state machine
			tc := newTestCluster(t, 3, func(i int, c *Config) {
				slowTimeouts(300*time.Millisecond, 150*time.Millisecond)(i, c)
				c.WallClock = func() time.Time { return time.Now().Add(time.Duration(offsets[i].Load())) }
				gate.install(i, c)
			})
			li := tc.readyLeader()
			for i := range offsets {
				if i != li {
					offsets[i].Store(int64(tt.skew))
				}
			}
			pt := tc.writePreviousTerm(li)
			before := map[int]int64{} // each survivor's skewed wall clock before the election
			for i, n := range tc.nodes {
				if i != li {
					before[i] = n.cfg.WallClock().UnixMilli()
				}
			}
			gate.arm()
			tc.isolate(li)

			ni := tc.readyLeader(li)
			next := tc.nodes[ni]
			p := next.FSM().Primary()
			if p.Holder != next.ID() || p.Generation <= pt.term {
				t.Fatalf("Primary() on the new leader = %+v, want %s's claim in a term after %d", p, next.ID(), pt.term)
			}
			checkClaimTime(t, p, gate.first(t, ni), before[ni])
			// The claim carries the new leader's skewed clock. A minute of
			// slack for the failover itself; the skew is an hour or more.
			if jump := time.Duration(p.ClaimedAt-pt.lastNow) * time.Millisecond; jump < tt.skew-time.Minute || jump > tt.skew+time.Minute {
				t.Fatalf("claim time is %v after the previous term's last command, want about the %v skew", jump, tt.skew)
			}
			checkRebased(t, next, pt, p, next.cfg.Grace)
			due, ok := next.FSM().NextExpiry()
			if !ok || due < p.ClaimedAt+next.cfg.Grace.Milliseconds() {
				t.Fatalf("NextExpiry() = %d, %v, want no expiry before the claim at %d plus the grace %v", due, ok, p.ClaimedAt, next.cfg.Grace)
			}
		})
	}
}
