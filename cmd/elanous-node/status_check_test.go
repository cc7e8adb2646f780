package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// healthyReport is a status report of three healthy candidates, node-a
// leading; each case breaks it in one way.
func healthyReport() statusReport {
	config := []wire.ServerInfo{{Machine: "node-a", Suffrage: "Voter"}, {Machine: "node-b", Suffrage: "Voter"}, {Machine: "node-c", Suffrage: "Voter"}}
	row := func(name, state string, lastContact int64) statusCandidate {
		return statusCandidate{Machine: name, URL: "http://" + name + ":31413", Reachable: true, State: state, Ready: true, Term: 4,
			Generation: 4, LastIndex: 100, CommitIndex: 100, AppliedIndex: 99, StateHash: "hash-99", LastContactMs: lastContact,
			Voter: true, Leader: "node-a", Version: "1.0.0", config: config}
	}
	return statusReport{Candidates: []statusCandidate{row("node-a", "Leader", 0), row("node-b", "Follower", 20), row("node-c", "Follower", 30)}}
}

func TestJudgeHealth(t *testing.T) {
	opts := healthOptions{enabled: true, maxLag: 250, maxLastContact: time.Second}
	for _, tt := range []struct {
		name       string
		edit       func(r *statusReport)
		wantExit   int
		wantReason string // a substring of one reason
		tolerance  int
	}{
		{"all healthy", func(*statusReport) {}, exitHealthy, "", 1},
		{"hashes compared only at equal index", func(r *statusReport) {
			r.Candidates[2].AppliedIndex, r.Candidates[2].StateHash = 98, "hash-98"
		}, exitHealthy, "", 1},
		{"a follower unreachable", func(r *statusReport) {
			r.Candidates[2] = statusCandidate{Machine: "node-c", URL: "http://node-c:31413", Error: "connection refused", LastContactMs: -1}
		}, exitDegraded, "node-c http://node-c:31413: unreachable: connection refused", 0},
		{"a follower unreachable puts the quorum at risk", func(r *statusReport) {
			r.Candidates[1] = statusCandidate{Machine: "node-b", URL: "http://node-b:31413", Error: "timeout", LastContactMs: -1}
		}, exitDegraded, "quorum at risk: 2 of 3 voters healthy, quorum 2", 0},
		{"a follower lagging", func(r *statusReport) { r.Candidates[0].LastIndex = 351 }, exitDegraded, "251 log entries behind the leader (max 250)", 0},
		{"a follower not heard from", func(r *statusReport) { r.Candidates[2].LastContactMs = 1500 }, exitDegraded, "last heard from the leader 1.5s ago (max 1s)", 0},
		{"a follower that never heard from the leader", func(r *statusReport) { r.Candidates[2].LastContactMs = -1 }, exitDegraded, "never heard from the leader", 0},
		{"a follower not ready", func(r *statusReport) { r.Candidates[1].Ready = false }, exitDegraded, "not ready", 0},
		{"hashes differ at one index", func(r *statusReport) { r.Candidates[2].StateHash = "other" }, exitDegraded, "state hashes differ at applied index 99", 1},
		{"a voter nobody asked", func(r *statusReport) { r.Candidates = r.Candidates[:2] }, exitDegraded, "voter node-c: not among the candidates asked", 0},
		{"an unreachable candidate outside the configuration", func(r *statusReport) {
			r.Candidates = append(r.Candidates, statusCandidate{URL: "http://old:31413", Error: "refused", LastContactMs: -1})
		}, exitDegraded, "http://old:31413: unreachable", 1},
		{"no leader", func(r *statusReport) {
			r.Candidates[0] = statusCandidate{Machine: "node-a", URL: "http://node-a:31413", Error: "refused", LastContactMs: -1}
			r.Candidates[1].State, r.Candidates[1].Ready = "Candidate", false
			r.Candidates[2] = statusCandidate{Machine: "node-c", URL: "http://node-c:31413", Error: "refused", LastContactMs: -1}
		}, exitNoLeader, "no leader: node-a unreachable, node-b is Candidate at term 4, node-c unreachable", 0},
		{"a leader that has not claimed", func(r *statusReport) { r.Candidates[0].Ready = false }, exitNoLeader, "node-a leads term 4 but has not applied its claim yet", 0},
		{"a stale leader loses to the newer term", func(r *statusReport) {
			r.Candidates[1].State, r.Candidates[1].Term, r.Candidates[1].Ready = "Leader", 5, false
		}, exitNoLeader, "node-b leads term 5", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := healthyReport()
			tt.edit(&r)
			h := judgeHealth(r, opts)
			if h.ExitCode != tt.wantExit {
				t.Fatalf("judgeHealth() exit %d (%s), want %d; reasons %q", h.ExitCode, h.Status, tt.wantExit, h.Reasons)
			}
			if tt.wantReason == "" && len(h.Reasons) > 0 {
				t.Errorf("judgeHealth() reasons = %q, want none", h.Reasons)
			}
			if tt.wantReason != "" && !strings.Contains(strings.Join(h.Reasons, "\n"), tt.wantReason) {
				t.Errorf("judgeHealth() reasons = %q, want one containing %q", h.Reasons, tt.wantReason)
			}
			if tt.wantExit != exitNoLeader && h.FailureTolerance != tt.tolerance {
				t.Errorf("judgeHealth() failure tolerance = %d, want %d", h.FailureTolerance, tt.tolerance)
			}
			err := h.exit()
			var coded *exitError
			switch {
			case tt.wantExit == exitHealthy && err != nil:
				t.Errorf("exit() = %v, want nil", err)
			case tt.wantExit != exitHealthy && (!errors.As(err, &coded) || coded.ExitCode() != tt.wantExit):
				t.Errorf("exit() = %v, want an exit status %d", err, tt.wantExit)
			}
		})
	}
}
