package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// Exit statuses of `status --check`.
const (
	exitHealthy  = 0
	exitDegraded = 1
	exitNoLeader = 2
	exitUnknown  = 3
)

// exitError is an error that sets the process's exit status (main reads
// it with errors.As).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode is the exit status the error asks for.
func (e *exitError) ExitCode() int { return e.code }

// healthOptions are the flags of `status --check`.
type healthOptions struct {
	enabled        bool
	maxLag         uint64
	maxLastContact time.Duration
}

func (o *healthOptions) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&o.enabled, "check", false, "judge the cluster's health and exit 0 healthy, 1 degraded, 2 no leader, 3 could not check")
	fs.Uint64Var(&o.maxLag, "max-lag", 250, "with --check: a voter more log entries than this behind the leader is unhealthy")
	fs.DurationVar(&o.maxLastContact, "max-last-contact", time.Second, "with --check: a follower that has not heard from the leader for longer is unhealthy")
}

// unknown marks err, with --check, as the check not having run (exit 3).
func (o healthOptions) unknown(err error) error {
	if !o.enabled {
		return err
	}
	return &exitError{code: exitUnknown, err: err}
}

// healthReport is the verdict of `status --check` (the "health" member of
// `status --check --json`).
type healthReport struct {
	Status   string `json:"status"` // healthy, degraded or no-leader
	ExitCode int    `json:"exitCode"`
	Leader   string `json:"leader,omitempty"`
	// Voters counts the voters of the leader's Raft configuration, Healthy
	// those judged healthy; FailureTolerance is how many more voters may
	// fail with the quorum kept (healthy − quorum, at least 0).
	Voters           int `json:"voters"`
	HealthyVoters    int `json:"healthyVoters"`
	Quorum           int `json:"quorum"`
	FailureTolerance int `json:"failureTolerance"`
	// HashesCompared is how many candidates shared an applied index with
	// another, so that their state hashes could be compared; HashesAgree
	// whether every such group agreed.
	HashesCompared int          `json:"hashesCompared"`
	HashesAgree    bool         `json:"hashesAgree"`
	Reasons        []string     `json:"reasons"`
	Nodes          []nodeHealth `json:"nodes"`
}

// nodeHealth is one candidate's part of the verdict.
type nodeHealth struct {
	Machine       string   `json:"machine"`
	URL           string   `json:"url"`
	Reachable     bool     `json:"reachable"`
	Voter         bool     `json:"voter"`
	Healthy       bool     `json:"healthy"`
	Lag           int64    `json:"lag"` // log entries behind the leader; -1 unknown
	LastContactMs int64    `json:"lastContactMs"`
	Version       string   `json:"version,omitempty"`
	AppliedIndex  uint64   `json:"appliedIndex"`
	StateHash     string   `json:"stateHash,omitempty"`
	Problems      []string `json:"problems,omitempty"`
}

// judgeHealth judges a status report. The leader is the reachable candidate
// that says it leads (the highest term if several do); the voters are those
// of its Raft configuration.
func judgeHealth(r statusReport, o healthOptions) healthReport {
	h := healthReport{Reasons: []string{}, Nodes: []nodeHealth{}, HashesAgree: true}
	var leader *statusCandidate
	for i := range r.Candidates {
		c := &r.Candidates[i]
		if c.Reachable && c.State == "Leader" && (leader == nil || c.Term > leader.Term) {
			leader = c
		}
	}
	for _, c := range r.Candidates {
		n := nodeHealth{Machine: c.Machine, URL: c.URL, Reachable: c.Reachable, Lag: -1, LastContactMs: c.LastContactMs, Version: c.Version,
			AppliedIndex: c.AppliedIndex, StateHash: c.StateHash, Healthy: true}
		if leader != nil && c.State != "" && leader.LastIndex >= c.LastIndex {
			n.Lag = int64(leader.LastIndex - c.LastIndex)
		}
		switch {
		case !c.Reachable:
			n.Problems = append(n.Problems, "unreachable: "+c.Error)
		case c.State == "":
			n.Problems = append(n.Problems, "did not report its status: "+c.Error)
		case !c.Ready:
			n.Problems = append(n.Problems, fmt.Sprintf("not ready (%s, knows leader %q)", c.State, c.Leader))
		}
		if leader != nil && c.State != "" && c.Machine != leader.Machine {
			if n.Lag > int64(o.maxLag) {
				n.Problems = append(n.Problems, fmt.Sprintf("%d log entries behind the leader (max %d)", n.Lag, o.maxLag))
			}
			switch last := time.Duration(c.LastContactMs) * time.Millisecond; {
			case c.LastContactMs < 0:
				n.Problems = append(n.Problems, "never heard from the leader")
			case last > o.maxLastContact:
				n.Problems = append(n.Problems, fmt.Sprintf("last heard from the leader %s ago (max %s)", last, o.maxLastContact))
			}
		}
		n.Healthy = len(n.Problems) == 0
		h.Nodes = append(h.Nodes, n)
	}

	if leader == nil || !leader.Ready {
		h.Status, h.ExitCode = "no-leader", exitNoLeader
		if leader != nil {
			h.Reasons = append(h.Reasons, fmt.Sprintf("no leader: %s leads term %d but has not applied its claim yet", leader.Machine, leader.Term))
		} else {
			var views []string
			for _, c := range r.Candidates {
				switch {
				case !c.Reachable:
					views = append(views, orDash(c.Machine)+" unreachable")
				case c.State == "":
					views = append(views, orDash(c.Machine)+" did not report its status")
				default:
					views = append(views, fmt.Sprintf("%s is %s at term %d", c.Machine, c.State, c.Term))
				}
			}
			h.Reasons = append(h.Reasons, "no leader: "+strings.Join(views, ", "))
		}
		return h
	}
	h.Leader = leader.Machine

	// The voters, by the leader's configuration.
	byName := map[string]int{}
	for i, n := range h.Nodes {
		if n.Machine != "" {
			byName[n.Machine] = i
		}
	}
	for _, srv := range leader.config {
		if srv.Suffrage != "Voter" {
			continue
		}
		h.Voters++
		i, ok := byName[srv.Machine]
		if !ok {
			h.Reasons = append(h.Reasons, fmt.Sprintf("voter %s: not among the candidates asked, or unreachable", srv.Machine))
			continue
		}
		h.Nodes[i].Voter = true
		if h.Nodes[i].Healthy {
			h.HealthyVoters++
		}
	}
	for _, n := range h.Nodes {
		for _, p := range n.Problems {
			h.Reasons = append(h.Reasons, fmt.Sprintf("%s: %s", orDash(n.Machine)+" "+n.URL, p))
		}
	}
	h.Quorum = h.Voters/2 + 1
	h.FailureTolerance = max(0, h.HealthyVoters-h.Quorum)
	if h.HealthyVoters < h.Voters && h.HealthyVoters-h.Quorum < 1 {
		h.Reasons = append(h.Reasons, fmt.Sprintf("quorum at risk: %d of %d voters healthy, quorum %d", h.HealthyVoters, h.Voters, h.Quorum))
	}

	// State hashes of candidates at one applied index.
	byIndex := map[uint64][]nodeHealth{}
	for _, n := range h.Nodes {
		if n.StateHash != "" {
			byIndex[n.AppliedIndex] = append(byIndex[n.AppliedIndex], n)
		}
	}
	indexes := make([]uint64, 0, len(byIndex))
	for i := range byIndex {
		indexes = append(indexes, i)
	}
	slices.Sort(indexes)
	for _, i := range indexes {
		group := byIndex[i]
		if len(group) < 2 {
			continue
		}
		h.HashesCompared += len(group)
		for _, n := range group[1:] {
			if n.StateHash != group[0].StateHash {
				h.HashesAgree = false
				var parts []string
				for _, g := range group {
					parts = append(parts, g.Machine+" "+short(g.StateHash))
				}
				h.Reasons = append(h.Reasons, fmt.Sprintf("state hashes differ at applied index %d: %s", i, strings.Join(parts, ", ")))
				break
			}
		}
	}

	if len(h.Reasons) > 0 {
		h.Status, h.ExitCode = "degraded", exitDegraded
	} else {
		h.Status, h.ExitCode = "healthy", exitHealthy
	}
	return h
}

// exit is the command's result for the verdict: nil when healthy, else an
// exitError with the verdict's status.
func (h healthReport) exit() error {
	if h.ExitCode == exitHealthy {
		return nil
	}
	msg := h.Status
	if len(h.Reasons) > 0 {
		msg += ": " + h.Reasons[0]
	}
	return &exitError{code: h.ExitCode, err: errors.New(msg)}
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

func printHealth(w io.Writer, h healthReport) error {
	fmt.Fprintf(w, "\nhealth: %s (exit %d)", h.Status, h.ExitCode)
	if h.Leader != "" {
		fmt.Fprintf(w, ": leader %s, %d of %d voters healthy, quorum %d, failure tolerance %d", h.Leader, h.HealthyVoters, h.Voters, h.Quorum, h.FailureTolerance)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MACHINE\tHEALTHY\tVOTER\tLAG\tLAST CONTACT\tAPPLIED\tSTATE HASH\tVERSION")
	for _, n := range h.Nodes {
		lag, contact, applied := "-", "-", "-"
		if n.Lag >= 0 {
			lag = fmt.Sprint(n.Lag)
		}
		if n.StateHash != "" {
			contact, applied = lastContact(n.LastContactMs), fmt.Sprint(n.AppliedIndex)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(n.Machine), yesNo(n.Healthy), yesNo(n.Voter), lag,
			contact, applied, orDash(short(n.StateHash)), orDash(n.Version))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case h.HashesCompared == 0:
		fmt.Fprintln(w, "state hashes: no two candidates at the same applied index to compare")
	case h.HashesAgree:
		fmt.Fprintf(w, "state hashes: agree (%d candidates compared at equal applied index)\n", h.HashesCompared)
	}
	for _, r := range h.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	return nil
}
