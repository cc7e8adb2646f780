package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// statusCandidate is one row of `status`.
type statusCandidate struct {
	Machine       string `json:"machine"`
	URL           string `json:"url"`
	Reachable     bool   `json:"reachable"`
	State         string `json:"state"`
	Generation    uint64 `json:"generation"`
	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commitIndex"`
	AppliedIndex  uint64 `json:"appliedIndex"`
	LastContactMs int64  `json:"lastContactMs"`
	Voter         bool   `json:"voter"`
	Error         string `json:"error,omitempty"`

	Ready     bool   `json:"ready"`
	LastIndex uint64 `json:"lastIndex"`
	Leader    string `json:"leader,omitempty"` // the leader this candidate knows
	StateHash string `json:"stateHash,omitempty"`
	Format    int    `json:"format,omitempty"`
	Version   string `json:"version,omitempty"` // "" from a build that does not report it

	counts *wire.Counts       // from this candidate's status, when it answered
	limits *wire.LimitsStatus // likewise
	config []wire.ServerInfo  // the Raft configuration it holds
}

// statusPrimary is the resolved primary.
type statusPrimary struct {
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	URL        string `json:"url"`
}

// statusReport is the output of `status --json`.
type statusReport struct {
	Candidates []statusCandidate `json:"candidates"`
	Primary    statusPrimary     `json:"primary"`
	Counts     wire.Counts       `json:"counts"`
	// Limits are the quotas (and the reporting candidate's own limits).
	Limits *wire.LimitsStatus `json:"limits,omitempty"`
	Health *healthReport      `json:"health,omitempty"` // with --check
}

// statusProbeTimeout bounds each candidate's answer.
const statusProbeTimeout = 5 * time.Second

func newStatusCmd() *cobra.Command {
	var (
		flags  clientFlags
		asJSON bool
		check  healthOptions
	)
	cmd := &cobra.Command{
		Use:   "status [--candidates URLS] [--json] [--check]",
		Short: "Show every candidate's Raft state, then the primary and counts; --check for scripts",
		Long: `Ask every candidate for its own view of the cluster (GET /v1/cluster/status,
query scope) and for the primary (GET /v1/primary), then print one row per
candidate — reachable, Raft state, ready, generation, term, last log index,
commit and applied index, last contact with the leader, voter, version —
followed by the primary (the highest-generation claim), the counts of
resources, leases and tokens, and the cluster's quotas in force
("elanous-node limits get" shows them in full).

The command fails when no candidate is reachable.

--check judges the cluster's health for scripts and monitoring, in the
spirit of "etcdctl endpoint health" and "consul operator autopilot state".
A voter is healthy when it answers, is ready, lags the leader's log by at most
--max-lag entries and heard from the leader within --max-last-contact. The
report gives the failure tolerance (healthy voters minus the quorum), each
candidate's lag, last contact and version, and whether the state hashes of
candidates at the same applied index agree. Exit status:
  0  healthy
  1  degraded: a candidate unreachable, not ready or lagging, the quorum at
     risk (one more failure loses it), or state hashes that differ at one index
  2  no leader (or a leader whose claim is not applied yet)
  3  the check could not run (configuration, token)
It says why on standard output.`,
		Example: `  # a dev cluster, query token from the environment
  ELANOUS_TOKEN=<query token> elanous-node status --candidates http://127.0.0.1:31413,http://127.0.0.1:31423,http://127.0.0.1:31433

  # the candidates of a config file, machine-readable
  elanous-node status --config /etc/elanous/elanous.yaml --token-file /var/lib/elanous/control/tokens.json --json`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := flags.env(cmd, member.ScopeQuery)
			if err != nil {
				return check.unknown(err)
			}
			report, err := collectStatus(cmd.Context(), env)
			if err != nil {
				return check.unknown(err)
			}
			if check.enabled {
				health := judgeHealth(report, check)
				report.Health = &health
			}
			if asJSON {
				err = writeJSON(cmd.OutOrStdout(), report)
			} else {
				err = printStatus(cmd.OutOrStdout(), report)
			}
			if err != nil {
				return err
			}
			if report.Health != nil {
				return report.Health.exit()
			}
			for _, c := range report.Candidates {
				if c.Reachable {
					return nil
				}
			}
			return errors.New("no candidate is reachable")
		},
	}
	flags.bind(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document instead of a table")
	check.bind(cmd)
	return cmd
}

// collectStatus probes every candidate concurrently, then resolves the
// primary with the candidates named as they name themselves.
func collectStatus(ctx context.Context, env *clientEnv) (statusReport, error) {
	r, err := env.resolver()
	if err != nil {
		return statusReport{}, err
	}
	cands := r.Candidates()
	rows := make([]statusCandidate, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Go(func() { rows[i] = probeCandidate(ctx, env, r, c) })
	}
	wg.Wait()

	// Candidates given as bare URLs take the name their server reports, so
	// the primary's holder can be matched by name.
	named := make([]member.Candidate, len(cands))
	seen := map[string]bool{}
	for i, c := range cands {
		named[i] = c
		if c.Machine == "" && wire.ValidCandidate(rows[i].Machine) && !seen[rows[i].Machine] {
			named[i].Machine = rows[i].Machine
		}
		if named[i].Machine != "" {
			seen[named[i].Machine] = true
		}
	}
	pr, err := member.NewResolver(member.ResolverConfig{Candidates: named, Role: member.ScopeQuery,
		HTTPClient: env.httpc, Logger: env.logger, Timeout: statusProbeTimeout})
	if err != nil {
		return statusReport{}, err
	}
	addr, err := pr.Resolve(ctx)
	if err != nil {
		return statusReport{}, err
	}
	report := statusReport{Candidates: rows, Primary: statusPrimary{URL: addr.URL}}
	if addr.Generation > 0 {
		report.Primary.Holder, report.Primary.Generation = addr.Holder, addr.Generation
	}
	// Counts come from the primary's own view when it answered, else from
	// the first candidate that did.
	for _, row := range rows {
		if row.counts != nil && row.URL == addr.URL {
			report.Counts, report.Limits = *row.counts, row.limits
			return report, nil
		}
	}
	for _, row := range rows {
		if row.counts != nil {
			report.Counts, report.Limits = *row.counts, row.limits
			break
		}
	}
	return report, nil
}

// probeCandidate asks one candidate for its status with the token that may
// go to its address.
func probeCandidate(ctx context.Context, env *clientEnv, r *member.Resolver, c member.Candidate) statusCandidate {
	row := statusCandidate{Machine: c.Machine, URL: c.URL, LastContactMs: -1}
	addr, err := r.AddressFor(c.URL)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	cl, err := member.NewClient(member.ClientConfig{URL: addr.URL, Token: addr.Token, HTTPClient: env.httpc})
	if err != nil {
		row.Error = err.Error()
		return row
	}
	pctx, cancel := context.WithTimeout(ctx, statusProbeTimeout)
	defer cancel()
	st, err := cl.ClusterStatus(pctx)
	if err != nil {
		// An HTTP answer of any kind means the candidate is up.
		row.Reachable = member.StatusCode(err) != 0
		row.Error = explain(err, member.ScopeQuery).Error()
		if addr.Token == "" && member.StatusCode(err) == 401 {
			row.Error = "no token may be sent to this address (it is not the join file's)"
		}
		return row
	}
	row.Reachable = true
	if st.Machine != "" {
		row.Machine = st.Machine
	}
	row.State, row.Generation, row.Term = st.State, st.Generation, st.Term
	row.CommitIndex, row.AppliedIndex, row.LastContactMs, row.Voter = st.CommitIndex, st.AppliedIndex, st.LastContactMs, st.Voter
	row.Ready, row.LastIndex, row.Leader, row.StateHash, row.Format, row.Version = st.Ready, st.LastIndex, st.Leader, st.StateHash, st.Format, st.Version
	counts := st.Counts
	row.counts, row.limits, row.config = &counts, st.Limits, st.Configuration
	return row
}

// printStatus prints the table, the primary and the counts.
func printStatus(w io.Writer, r statusReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tURL\tREACHABLE\tSTATE\tREADY\tGENERATION\tTERM\tLAST INDEX\tCOMMIT\tAPPLIED\tLAST CONTACT\tVOTER\tVERSION")
	for _, c := range r.Candidates {
		if !c.Reachable || c.State == "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", orDash(c.Machine), c.URL, yesNo(c.Reachable))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\tyes\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", orDash(c.Machine), c.URL, c.State, yesNo(c.Ready),
			c.Generation, c.Term, c.LastIndex, c.CommitIndex, c.AppliedIndex, lastContact(c.LastContactMs), yesNo(c.Voter), orDash(c.Version))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Candidates {
		if c.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", orDash(c.Machine)+" "+c.URL, c.Error)
		}
	}
	fmt.Fprintln(w)
	if r.Primary.Generation > 0 {
		fmt.Fprintf(w, "primary: %s (generation %d) %s\n", r.Primary.Holder, r.Primary.Generation, r.Primary.URL)
	} else {
		fmt.Fprintf(w, "primary: unknown (no candidate knows a leader; members fall back to %s)\n", r.Primary.URL)
	}
	if _, err := fmt.Fprintf(w, "counts: %d resources, %d leases, %d tokens\n", r.Counts.Resources, r.Counts.Leases, r.Counts.Tokens); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, limitsLine(r.Limits))
	if err == nil && r.Health != nil {
		err = printHealth(w, *r.Health)
	}
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// lastContact renders lastContactMs: -1 never, 0 on the leader.
func lastContact(ms int64) string {
	switch {
	case ms < 0:
		return "never"
	case ms == 0:
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
