package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// printModes writes the sections of the elanous-only measurements and the
// targets, below the comparison.
func printModes(w io.Writer, rep *report) {
	if sc := rep.Scale; sc != nil {
		printScale(w, rep, sc)
	}
	if wr := rep.Watches; wr != nil {
		printWatches(w, wr)
	}
	if sk := rep.Soak; sk != nil {
		fmt.Fprintf(w, "\nSoak (elanous): the renewal row's shape (%d clients, closed loop) for %.0f s, every node sampled every %.0f s: %s. Leader changes: %d; the term moved by %d.\n\n",
			rep.Options.Clients, sk.DurationSeconds, sk.SampleEverySeconds, loadCell(sk.Load), sk.LeaderChanges, sk.TermChange)
		fmt.Fprintf(w, "| member | highest RSS (sampled) | peak RSS (kernel) | RSS at the end | highest raft.db | raft.db at the end | snapshots taken | longest | last_snapshot_index / last index | retained |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for i, p := range sk.Peaks {
			sn := sk.Snapshots[i]
			fmt.Fprintf(w, "| %s | %s at %.0f s | %s | %s | %s at %.0f s | %s | %d | %s | %d / %d | %d |\n", p.Node, mib(p.MaxRSSBytes), p.MaxRSSAtSeconds,
				peakCell(p), mib(p.LastRSSBytes), mib(p.MaxDBBytes), p.MaxDBAtSeconds, mib(p.LastDBBytes), sn.Taken, msCell(sn.MaxMs), sn.LastSnapshotIndex, sn.LastIndex, sn.Retained)
		}
	}
	if c := rep.Calm; c != nil {
		fmt.Fprintf(w, "\nCalm run (elanous): an open loop at %.0f%% of %s/s (%s) = %s heartbeats/s for %.0f s over %d connections: %s.\n",
			c.Fraction*100, thousands(c.PeakPerSec), c.PeakFrom, thousands(c.Load.TargetPerSec), rep.Options.CalmSeconds, rep.Options.OpenClients, openCell(c.Load))
		fmt.Fprintf(w, "Leader changes: %d (the most one node counted); the term moved by %d.\n\n", c.LeaderChanges, c.TermChange)
		fmt.Fprintf(w, "| member | leader changes counted before → after | term before → after | highest RSS | highest raft.db |\n|---|---|---|---|---|\n")
		for i, n := range c.Nodes {
			restarted := ""
			if n.Restarted {
				restarted = " (restarted: not counted)"
			}
			fmt.Fprintf(w, "| %s | %.0f → %.0f%s | %d → %d | %s | %s |\n", n.Node, n.ChangesBefore, n.ChangesAfter, restarted, n.TermBefore, n.TermAfter,
				mib(c.Peaks[i].HighestRSS()), mib(c.Peaks[i].MaxDBBytes))
		}
	}
	if or := rep.OpenRow; or != nil {
		printOpenRow(w, rep, or)
	}
	if c := rep.Ceiling; c != nil {
		printCeiling(w, rep, c)
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintf(w, "\nTargets (MB read as MiB; a figure measured at other parameters than its bound is for says so):\n\n")
		fmt.Fprintf(w, "| figure | value | bound | met |\n|---|---|---|---|\n")
		for _, t := range rep.Targets {
			met := "no"
			switch {
			case !t.Measured:
				met = "not measured"
			case t.Met:
				met = "yes"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Figure, t.Value, t.Bound, met)
		}
	}
}

func printScale(w io.Writer, rep *report, sc *scaleReport) {
	fmt.Fprintf(w, "\nScale phase (elanous, %d resources, %d port leases held, one machine each):\n\n", sc.Resources, sc.Leases)
	fmt.Fprintf(w, "- heartbeat, the renewal row's shape (%d clients, closed loop): %s on the empty state, %s at %d resources: %.2f×\n",
		rep.Options.Clients, loadCell(sc.EmptyHeartbeat), loadCell(sc.FilledHeartbeat), sc.Resources, sc.HeartbeatRatio)
	primed := ""
	if sc.Primed > 0 {
		primed = fmt.Sprintf(" (after one heartbeat of each of the %d resources it renews, in %.1f s, so its renewals are covered as in a steady state)", sc.Primed, sc.PrimeSeconds)
	}
	fmt.Fprintf(w, "- open loop, each request on the next resource, %d connections%s: %s\n", rep.Options.OpenClients, primed, openCell(sc.Open))
	if len(sc.Snapshots) == 0 {
		fmt.Fprintf(w, "- snapshots with %d resources: none completed within %.0f s after the load (raft last_snapshot_index: %s)\n", sc.Resources, sc.SnapshotWaitSeconds, indexCell(sc.LastSnapshotIndex))
	} else {
		var parts []string
		for _, sp := range sc.Snapshots {
			parts = append(parts, fmt.Sprintf("%s %.0f ms (index %d)", sp.Node, sp.DurationMs, sp.Index))
		}
		fmt.Fprintf(w, "- snapshots with %d resources, from \"starting snapshot\" to \"snapshot complete\" in raft's log: %s; longest %.0f ms\n", sc.Resources, strings.Join(parts, ", "), sc.SnapshotMaxMs)
	}
	if r := sc.Restart; r != nil {
		fmt.Fprintf(w, "- follower restart: %s stopped %.0f ms after SIGTERM (log to %d, last snapshot at %d, %d snapshots on disk); served /v1/ready %.0f ms after its start; RSS then %s\n",
			r.Node, r.StopMs, r.LastIndex, r.LastSnapshotIndex, r.SnapshotsOnDisk, r.ReadyMs, mib(r.RSSBytes))
	}
	fmt.Fprintf(w, "\nEach node's footprint from the fill's end through the snapshot wait (the peak is VmHWM over that window, so it holds the spike of every snapshot the node took in it):\n")
	fmt.Fprintf(w, "\n| member | RSS at rest | highest RSS (sampled) | peak RSS (kernel) | snapshots in the window | raft.db at rest | highest raft.db |\n|---|---|---|---|---|---|---|\n")
	for i, p := range sc.Peaks {
		var rest nodeSample
		if i < len(sc.AtRest) {
			rest = sc.AtRest[i]
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", p.Node, mib(rest.RSSBytes), mib(p.MaxRSSBytes), peakCell(p),
			snapshotsCell(sc.Snapshots, p.Node), mib(rest.DBBytes), mib(p.MaxDBBytes))
	}
}

func printWatches(w io.Writer, wr *watchReport) {
	fmt.Fprintf(w, "\nWatches (elanous): %d members each hold GET /v1/primary?index=<current>&wait=%s on every candidate (%d per candidate from each of %d loopback addresses), opened in %.1f s and held %.0f s; leader changes meanwhile: %d (the term moved by %d):\n\n",
		wr.PerCandidate, wr.Wait, wr.PerAddress, wr.Addresses, wr.OpenSeconds, wr.HoldSeconds, wr.LeaderChanges, wr.TermChange)
	fmt.Fprintf(w, "| candidate | held | refused (429) | answered | other status | failed | its blocking-query count | RSS before | highest RSS (sampled) | peak RSS (kernel) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i, nd := range wr.Nodes {
		gauge := "—"
		if nd.BlockingQueries != nil {
			gauge = thousands(*nd.BlockingQueries)
		}
		p := wr.Peaks[i]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n", nd.Node, nd.Held, nd.Refused, nd.Answered, nd.OtherStatus, nd.Failed, gauge,
			mib(nd.BaselineRSSBytes), mib(p.MaxRSSBytes), peakCell(p))
	}
	if len(wr.ErrorKinds) > 0 {
		var parts []string
		for k, n := range wr.ErrorKinds {
			parts = append(parts, fmt.Sprintf("%d× %s", n, k))
		}
		fmt.Fprintf(w, "\nWatch failures: %s.\n", strings.Join(parts, "; "))
	}
}

// loadCell is a closed loop's figures in a sentence.
func loadCell(st *stats) string {
	if st == nil {
		return "—"
	}
	out := fmt.Sprintf("%s/s, p50 %s ms, p99 %s ms", thousands(st.OpsPerSec), fmtMs(st.P50Ms), fmtMs(st.P99Ms))
	if st.Errors > 0 {
		out += fmt.Sprintf(", %d errors (%s)", st.Errors, st.errorText())
	}
	return out
}

// openCell is an open loop's figures in a sentence.
func openCell(st *stats) string {
	if st == nil {
		return "—"
	}
	out := fmt.Sprintf("offered %s/s, achieved %s/s, p50 %s ms, p99 %s ms from the due time (service p99 %s ms)",
		thousands(st.TargetPerSec), thousands(st.OpsPerSec), fmtMs(st.P50Ms), fmtMs(st.P99Ms), fmtMs(st.ServiceP99Ms))
	if st.Errors > 0 || st.Dropped > 0 {
		out += fmt.Sprintf(", %d errors, %d dropped", st.Errors, st.Dropped)
		if st.Errors > 0 {
			out += " (" + st.errorText() + ")"
		}
	}
	return out
}

func peakCell(p nodePeak) string {
	if p.PeakRSSBytes == 0 {
		return "—"
	}
	return mib(p.PeakRSSBytes)
}

func msCell(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", v)
}

func indexCell(m map[string]uint64) string {
	if len(m) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func printCeiling(w io.Writer, rep *report, c *ceilingReport) {
	fmt.Fprintf(w, "\nHTTP/1.1 ceiling: the register row's requests, %d clients, answered at once with no work behind them:\n\n", rep.Options.Clients)
	fmt.Fprintf(w, "| shape | requests/s |\n|---|---|\n")
	fmt.Fprintf(w, "| every client on the answering process | %s |\n", loadCell(c.One))
	fmt.Fprintf(w, "| spread over three processes, two forwarding to the first | %s |\n", loadCell(c.Spread))
	if len(c.OfSpread) == 0 {
		return
	}
	fmt.Fprintf(w, "\n| elanous row | requests/s | of the spread ceiling | 1.5× the best etcd, of the spread ceiling |\n|---|---|---|---|\n")
	for _, row := range rep.Rows {
		f, ok := c.OfSpread[row.ID]
		if !ok {
			continue
		}
		need := "—"
		if best := row.Results[row.BestEtcd]; best != nil && row.BestEtcd != "" {
			need = fmt.Sprintf("%.0f%%", 150*best.OpsPerSec/c.Spread.OpsPerSec)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f%% | %s |\n", row.ID, thousands(row.Results["elanous"].OpsPerSec), 100*f, need)
	}
}

// snapshotsCell is how many of spans are node's, and the longest.
func snapshotsCell(spans []snapshotSpan, node string) string {
	n, longest := 0, 0.0
	for _, sp := range spans {
		if sp.Node == node {
			n++
			longest = max(longest, sp.DurationMs)
		}
	}
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, longest %.0f ms", n, longest)
}

func printOpenRow(w io.Writer, rep *report, or *openRowReport) {
	var mix []string
	for _, k := range []eventKind{eventLoad, eventInstance, eventLease} {
		if n := or.Mix[k.String()]; n > 0 {
			mix = append(mix, fmt.Sprintf("%s %ss", thousands(float64(n)), k))
		}
	}
	fmt.Fprintf(w, "\nOpen row (elanous): %d members (%s records), port leases per member: %d (their renewals spread over %d held), %d requests per member per 300 s: %s/s at the cadence; due within the %.0f s run: %s. %d instances and leases renewed once before the clock, in %.1f s.\n",
		or.Members, or.Records, or.Leases, or.HeldLeases, or.PerCycle, thousands(or.CadencePerSec), rep.Options.RateSeconds, strings.Join(mix, ", "), or.Primed, or.PrimeSeconds)
	if len(or.Peaks) == 0 {
		return
	}
	fmt.Fprintf(w, "\n| member | highest RSS (sampled) | peak RSS (kernel) | RSS at the end | highest raft.db | snapshots taken | longest |\n|---|---|---|---|---|---|---|\n")
	for i, p := range or.Peaks {
		var sn nodeSnapshots
		if i < len(or.Snapshots) {
			sn = or.Snapshots[i]
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s |\n", p.Node, mib(p.MaxRSSBytes), peakCell(p), mib(p.LastRSSBytes), mib(p.MaxDBBytes), sn.Taken, msCell(sn.MaxMs))
	}
}
