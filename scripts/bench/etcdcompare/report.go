package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// printTable writes the report as Markdown: a header, the comparison table
// and the footprint of every member.
func printTable(w io.Writer, rep *report) {
	o := rep.Options
	fmt.Fprintf(w, "compare-etcd, %s, %s: %d CPUs, %s, load average %s at the start and %s at the end\n\n",
		rep.Started.Format("2006-01-02 15:04"), time.Duration(rep.RuntimeSeconds*float64(time.Second)).Round(time.Second),
		rep.Host.CPUs, rep.Host.GoVersion, rep.Host.LoadAvgStart, rep.Host.LoadAvgEnd)
	var names []string
	for _, s := range rep.Systems {
		v := s.Name + " " + s.Version
		if s.Name == "elanous" && rep.Host.ElanousRev != "" {
			v = fmt.Sprintf("elanous %s (%s)", s.Version, rep.Host.ElanousRev)
		}
		if s.Name == "etcd 3.4" {
			v += " (Debian etcd-server)"
		}
		names = append(names, v)
	}
	kills := ""
	if slices.Contains(o.Ops, rowFailover) {
		kills = fmt.Sprintf(", %d kills", o.Kills)
	}
	fmt.Fprintf(w, "Systems: %s. Three members each on loopback, default settings; %d clients over the three members, %s per row%s, fill %d.\n",
		strings.Join(names, ", "), o.Clients, time.Duration(o.DurationSeconds*float64(time.Second)), kills, o.Fill)
	if len(o.ElanousEnv) > 0 {
		fmt.Fprintf(w, "elanous nodes ran with %s.\n", strings.Join(o.ElanousEnv, " "))
	}
	for name, f := range rep.Fill {
		fmt.Fprintf(w, "Fill of %s: %d records in %.1fs (%s/s).\n", name, f.Ops, f.Seconds, thousands(f.OpsPerSec))
	}

	cols := []string{"etcd 3.4", "etcd 3.6", "elanous"}
	if len(rep.Rows) > 0 {
		fmt.Fprintf(w, "\n| row | %s | elanous / best etcd | target |\n", strings.Join(cols, " | "))
		fmt.Fprintf(w, "|---|%s---|---|\n", strings.Repeat("---|", len(cols)))
		for _, row := range rep.Rows {
			cells := []string{fmt.Sprintf("%s: %s", row.ID, row.Title)}
			for _, c := range cols {
				cells = append(cells, cell(row, row.Results[c]))
			}
			cells = append(cells, ratioCell(row), targetCell(rep.Targets, row.ID))
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
		fmt.Fprintf(w, "\nRows, etcd vs elanous:\n")
		for _, row := range rep.Rows {
			fmt.Fprintf(w, "- %s: %s vs %s\n", row.ID, row.Etcd, row.Elanous)
		}
	}

	if len(rep.Usage) > 0 {
		fmt.Fprintf(w, "\nFootprint of each member at the end of its system's run, and its RSS before the failover row restarted members:\n\n")
		fmt.Fprintf(w, "| system | member | RSS at the end | RSS before kills | store | store size | data dir | restarts |\n|---|---|---|---|---|---|---|---|\n")
		for _, u := range rep.Usage {
			before := "—"
			if u.RSSBeforeKillsBytes > 0 {
				before = mib(u.RSSBeforeKillsBytes)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %d |\n", u.System, u.Node, mib(u.RSSBytes), before, u.DBName, mib(u.DBBytes), mib(u.DataBytes), u.Restarts)
		}
	}
	var warns []string
	for _, row := range rep.Rows {
		for _, c := range cols {
			if st := row.Results[c]; st != nil && st.Errors > 0 {
				warns = append(warns, fmt.Sprintf("%s, %s: %d errors: %s", row.ID, c, st.Errors, st.errorText()))
			}
		}
	}
	if len(warns) > 0 {
		fmt.Fprintf(w, "\nErrors (failover errors are the writes refused or timed out during the elections):\n")
		for _, wn := range warns {
			fmt.Fprintf(w, "- %s\n", wn)
		}
	}
	printModes(w, rep)
}

// cell is one system's figures on one row.
func cell(row rowReport, st *stats) string {
	if st == nil {
		return "—"
	}
	if row.ID == rowFailover {
		return fmt.Sprintf("median %s · max %s ms", thousands(st.GapMedianMs), thousands(st.GapMaxMs))
	}
	if row.ID == rowOpen {
		out := fmt.Sprintf("%s/s of %s/s · p50 %s · p99 %s ms", thousands(st.OpsPerSec), thousands(st.TargetPerSec), fmtMs(st.P50Ms), fmtMs(st.P99Ms))
		if st.Errors > 0 || st.Dropped > 0 {
			out += fmt.Sprintf(" · %d errors, %d dropped", st.Errors, st.Dropped)
		}
		return out
	}
	unit := "/s"
	if row.Unit == "writes" {
		unit = " writes/s"
	}
	out := fmt.Sprintf("%s%s · p50 %s · p99 %s ms", thousands(st.OpsPerSec), unit, fmtMs(st.P50Ms), fmtMs(st.P99Ms))
	if st.CPUMsPerKOp > 0 {
		out += fmt.Sprintf(" · server CPU %s ms per 1k", fmtMs(st.CPUMsPerKOp))
	}
	if st.Errors > 0 {
		out += fmt.Sprintf(" · %d errors", st.Errors)
	}
	return out
}

// ratioCell is elanous / best etcd, naming the etcd it compares with.
func ratioCell(row rowReport) string {
	if row.Ratio == 0 {
		return "—"
	}
	vs := strings.TrimPrefix(row.BestEtcd, "etcd ")
	switch row.ID {
	case rowFailover:
		return fmt.Sprintf("%.2f× median gap vs %s (below 1 is faster)", row.Ratio, vs)
	case rowSingle:
		return fmt.Sprintf("%.2f× ops/s vs %s; p50 %.2f× the lower etcd p50", row.Ratio, vs, row.P50Ratio)
	case rowOpen:
		return fmt.Sprintf("%.2f× p99 vs %s (below 1 is faster)", row.Ratio, vs)
	}
	return fmt.Sprintf("%.2f× vs %s", row.Ratio, vs)
}

func fmtMs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// targetCell is the bounds of a row's figures and whether each was met:
// "≥ 1.50×: pass".
func targetCell(ts []target, row string) string {
	var parts []string
	for _, t := range ts {
		if t.Row != row {
			continue
		}
		verdict := "fail"
		switch {
		case !t.Measured:
			verdict = "not measured"
		case t.Met:
			verdict = "pass"
		}
		parts = append(parts, t.Bound+": "+verdict)
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}
