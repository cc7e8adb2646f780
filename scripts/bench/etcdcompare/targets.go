package main

import (
	"fmt"
	"time"
)

// target is one figure of the run beside the bound the project holds it to.
type target struct {
	Figure string `json:"figure"`
	Value  string `json:"value"`
	Bound  string `json:"bound"`
	// Met says whether the value is within the bound; a figure that could
	// not be measured (Measured false) is not met.
	Met      bool `json:"met"`
	Measured bool `json:"measured"`
	// Row is the comparison row the figure belongs to, if any.
	Row string `json:"row,omitempty"`
}

// The bounds (MB read as MiB, as the tables print).
const (
	boundFailoverRatio  = 0.37             // median failover gap / best etcd's
	boundFailoverMaxMs  = 1000             // longest failover gap
	boundScaleRSS       = 256 << 20        // RSS per node with the scale state
	boundSnapshotMs     = 1000             // a snapshot with the scale state
	boundReadyMs        = 3000             // a restarted follower's /v1/ready
	boundOpenP99Ms      = 50               // p99 of the open loop
	boundOpenAchieved   = 0.99             // achieved / offered rate of the open loop
	boundHeartbeatRatio = 0.8              // heartbeat at N / on the empty state
	boundWatchRSS       = 200 << 20        // a candidate's RSS with the watches
	boundSoakDB         = 128 << 20        // raft.db during the soak
	boundSoakRSS        = 256 << 20        // RSS during the soak
	boundCalmChanges    = 0                // leader changes in the calm run
	issueSoak           = 10 * time.Minute // the soak's length the bounds are for
	issueCalm           = 10 * time.Minute // the calm run's length the bounds are for
	issueOpenRate       = 3400             // heartbeats/s the open loop's bound is for
	issueOpenDuration   = 60 * time.Second // its length
	issueFill           = 100_000          // the resources the scale bounds are for
	issueWatches        = 10_000           // the watches the watch bound is for
	issueKills          = 20               // the kills the failover bounds are for
	issueLeases         = 50               // the leases the scale bounds are for
	boundSingleP50      = 1.15             // the single client's p50 / the lower etcd p50
)

// rowBounds is the least elanous / best etcd ops/s of each throughput row:
// renewal must beat etcd's KeepAliveOnce by half again; the writes must not
// fall below where they stood before renewals left the log (register 0.95×,
// lock 0.86×); a load heartbeat is one write like a register, and is held to
// the register's bound.
var rowBounds = map[string]float64{rowWrite: 0.95, rowLock: 0.86, rowRenewal: 1.5, rowLoad: 0.95}

// targets lists the run's figures beside their bounds, for whatever ran.
// A figure measured at other parameters than the bound is for says so in
// its name.
func targets(rep *report) []target {
	var out []target
	row := ""
	add := func(figure, value, bound string, met, measured bool) {
		out = append(out, target{Figure: figure, Value: value, Bound: bound, Met: met && measured, Measured: measured, Row: row})
	}
	o := rep.Options
	for _, r := range rep.Rows {
		el := r.Results["elanous"]
		if el == nil {
			continue
		}
		row = r.ID
		switch r.ID {
		case rowWrite, rowLock, rowRenewal, rowLoad:
			if r.Ratio == 0 {
				continue
			}
			b := rowBounds[r.ID]
			add(fmt.Sprintf("%s: elanous / best etcd%s", r.ID, atParams(o.Fill > 0, fmt.Sprintf("fill %d", o.Fill))),
				fmt.Sprintf("%.2f×", r.Ratio), fmt.Sprintf("≥ %.2f×", b), r.Ratio >= b, true)
		case rowSingle:
			if r.Ratio == 0 {
				continue
			}
			add("single: elanous p50 / lower etcd p50", fmt.Sprintf("%.2f×", r.P50Ratio), fmt.Sprintf("≤ %.2f×", boundSingleP50), r.P50Ratio <= boundSingleP50, r.P50Ratio > 0)
		case rowFailover:
			if r.Ratio == 0 {
				continue
			}
			kills := atParams(o.Kills != issueKills, fmt.Sprintf("%d kills", o.Kills))
			add("failover: median gap / best etcd's"+kills, fmt.Sprintf("%.2f× (%s ms)", r.Ratio, thousands(el.GapMedianMs)),
				fmt.Sprintf("≤ %.2f×", boundFailoverRatio), r.Ratio <= boundFailoverRatio, true)
			add("failover: longest gap"+kills, thousands(el.GapMaxMs)+" ms", fmt.Sprintf("≤ %d ms", boundFailoverMaxMs), el.GapMaxMs <= boundFailoverMaxMs, true)
		case rowOpen:
			name := "open: elanous at the seed's cadence"
			if or := rep.OpenRow; or != nil {
				name += atParams(or.Members != issueFill/2 || o.RateSeconds != issueOpenDuration.Seconds(),
					fmt.Sprintf("%d members, %.0f s", or.Members, o.RateSeconds))
			}
			ok := el.OpsPerSec >= boundOpenAchieved*el.TargetPerSec && el.Dropped == 0 && el.P99Ms <= boundOpenP99Ms
			add(name, fmt.Sprintf("%s/s of %s/s, p99 %s ms, %d errors", thousands(el.OpsPerSec), thousands(el.TargetPerSec), fmtMs(el.P99Ms), el.Errors),
				fmt.Sprintf("offered rate sustained, p99 ≤ %d ms", boundOpenP99Ms), ok, true)
		}
	}
	row = ""
	if sc := rep.Scale; sc != nil {
		params := atParams(sc.Resources != issueFill || sc.Leases != issueLeases, fmt.Sprintf("%d resources, %d leases", sc.Resources, sc.Leases))
		var rss int64
		for _, p := range sc.Peaks {
			rss = max(rss, p.HighestRSS())
		}
		add("scale: highest RSS of a node"+params, mib(rss), "≤ "+mib(boundScaleRSS), rss <= boundScaleRSS, rss > 0)
		if len(sc.Snapshots) > 0 {
			add("scale: longest snapshot"+params, fmt.Sprintf("%.0f ms (%d taken)", sc.SnapshotMaxMs, len(sc.Snapshots)),
				fmt.Sprintf("≤ %d ms", boundSnapshotMs), sc.SnapshotMaxMs <= boundSnapshotMs, true)
		} else {
			add("scale: longest snapshot"+params, fmt.Sprintf("none taken within %.0f s", sc.SnapshotWaitSeconds), fmt.Sprintf("≤ %d ms", boundSnapshotMs), false, false)
		}
		if r := sc.Restart; r != nil {
			add("scale: restarted follower serves /v1/ready"+params, fmt.Sprintf("%.0f ms", r.ReadyMs), fmt.Sprintf("≤ %d ms", boundReadyMs), r.ReadyMs <= boundReadyMs, true)
		}
		if op := sc.Open; op != nil {
			name := "scale: open loop" + atParams(sc.Resources != issueFill || sc.Leases != issueLeases ||
				op.TargetPerSec != issueOpenRate || o.RateSeconds != issueOpenDuration.Seconds(),
				fmt.Sprintf("%d resources, %d leases, %s/s for %.0f s", sc.Resources, sc.Leases, thousands(op.TargetPerSec), o.RateSeconds))
			ok := op.OpsPerSec >= boundOpenAchieved*op.TargetPerSec && op.Dropped == 0 && op.P99Ms <= boundOpenP99Ms
			add(name, fmt.Sprintf("%s/s of %s/s, p99 %s ms, %d errors", thousands(op.OpsPerSec), thousands(op.TargetPerSec), fmtMs(op.P99Ms), op.Errors),
				fmt.Sprintf("%s/s sustained, p99 ≤ %d ms", thousands(issueOpenRate), boundOpenP99Ms), ok, true)
		}
		if sc.HeartbeatRatio > 0 {
			add("scale: heartbeat rate at N / on the empty state"+params, fmt.Sprintf("%.2f× (%s/s vs %s/s)", sc.HeartbeatRatio,
				thousands(sc.FilledHeartbeat.OpsPerSec), thousands(sc.EmptyHeartbeat.OpsPerSec)), fmt.Sprintf("≥ %.2f×", boundHeartbeatRatio),
				sc.HeartbeatRatio >= boundHeartbeatRatio, true)
		}
	}
	if w := rep.Watches; w != nil {
		var rss int64
		allHeld := true
		held := ""
		for i, nd := range w.Nodes {
			rss = max(rss, w.Peaks[i].HighestRSS())
			allHeld = allHeld && nd.Held == nd.Asked
			if i > 0 {
				held += ", "
			}
			held += fmt.Sprintf("%d", nd.Held)
		}
		add("watches: highest RSS of a candidate"+atParams(w.PerCandidate != issueWatches, fmt.Sprintf("%d watches", w.PerCandidate)),
			fmt.Sprintf("%s (held %s of %d)", mib(rss), held, w.PerCandidate), "≤ "+mib(boundWatchRSS)+", all held", rss <= boundWatchRSS && allHeld, rss > 0)
	}
	if sk := rep.Soak; sk != nil {
		params := atParams(sk.DurationSeconds != issueSoak.Seconds(), fmt.Sprintf("%.0f s", sk.DurationSeconds))
		var rss, db int64
		for _, p := range sk.Peaks {
			rss, db = max(rss, p.HighestRSS()), max(db, p.MaxDBBytes)
		}
		add("soak: highest raft.db of a node"+params, mib(db), "≤ "+mib(boundSoakDB), db <= boundSoakDB, db > 0)
		add("soak: highest RSS of a node"+params, mib(rss), "≤ "+mib(boundSoakRSS), rss <= boundSoakRSS, rss > 0)
	}
	if c := rep.Calm; c != nil {
		params := atParams(c.Load.Seconds < issueCalm.Seconds(), fmt.Sprintf("%.0f s", o.CalmSeconds))
		add("calm: leader changes"+params, fmt.Sprintf("%d (at %s/s, %s/s achieved)", c.LeaderChanges, thousands(c.Load.TargetPerSec), thousands(c.Load.OpsPerSec)),
			fmt.Sprintf("%d", boundCalmChanges), c.LeaderChanges <= boundCalmChanges, true)
	}
	return out
}

// atParams names the parameters a figure was measured at, when they are not
// the ones its bound is for.
func atParams(differ bool, params string) string {
	if !differ {
		return ""
	}
	return " (at " + params + ")"
}
