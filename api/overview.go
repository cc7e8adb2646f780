package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// overviewProbeTimeout bounds each peer's answer to the overview's probe: an
// unreachable candidate costs the overview this much at most.
const overviewProbeTimeout = 1500 * time.Millisecond

// clusterOverview answers GET /v1/cluster/overview (query scope): this node's
// own status and each other candidate's, asked concurrently with the
// caller's token on the forwarding client (ARCHITECTURE.md, "Web console").
// A candidate that does not answer within overviewProbeTimeout is listed
// unreachable with the reason.
func (s *Server) clusterOverview(c echo.Context) error {
	ctx := c.Request().Context()
	self := s.ownStatus(ctx)
	peers := s.node.Peers()
	rows := make([]wire.OverviewCandidate, len(peers))
	statuses := make([]*wire.ClusterStatus, len(peers))
	auth := c.Request().Header.Get("Authorization")
	var wg sync.WaitGroup
	for i, p := range peers {
		rows[i] = wire.OverviewCandidate{Machine: p.Machine, URL: p.URL, Suffrage: p.Suffrage, LastContactMs: -1}
		switch {
		case p.Machine == s.node.ID():
			statuses[i] = &self
		case p.URL == "":
			rows[i].Error = "no API URL is known for it"
		default:
			wg.Go(func() {
				st, err := s.probeStatus(ctx, p.URL, auth)
				if err != nil {
					rows[i].Error = err.Error()
					return
				}
				if st.Machine != p.Machine {
					rows[i].Error = fmt.Sprintf("%s answered at its URL", st.Machine)
					return
				}
				statuses[i] = &st
			})
		}
	}
	wg.Wait()

	// The leader's last index is the mark lag is counted from; without an
	// answer from the leader, the highest last index any candidate reported.
	var mark uint64
	for _, st := range statuses {
		if st != nil && st.State == "Leader" {
			mark = st.LastIndex
			break
		}
		if st != nil {
			mark = max(mark, st.LastIndex)
		}
	}
	for i, st := range statuses {
		if st == nil {
			continue
		}
		r := &rows[i]
		r.Reachable, r.State, r.Ready, r.Term, r.Generation = true, st.State, st.Ready, st.Term, st.Generation
		r.LastIndex, r.CommitIndex, r.AppliedIndex = st.LastIndex, st.CommitIndex, st.AppliedIndex
		r.LastContactMs, r.Voter, r.Version = st.LastContactMs, st.Voter, st.Version
		if mark > st.AppliedIndex {
			r.Lag = mark - st.AppliedIndex
		}
	}
	slices.SortFunc(rows, func(a, b wire.OverviewCandidate) int { return strings.Compare(a.Machine, b.Machine) })

	out := wire.ClusterOverview{
		ViewedFrom: self.Machine,
		AsOf:       time.Now().UnixMilli(),
		Leader:     self.Leader,
		Primary:    s.primary(),
		Band:       wire.PortBand{Start: s.band.Start, End: s.band.End},
		Candidates: rows,
	}
	out.Stale = self.Leader == "" || !self.Ready ||
		(self.State != "Leader" && (self.LastContactMs < 0 || self.LastContactMs > wire.OverviewStaleMs))
	s.readHeaders(c, fsm.TablePrimary)
	return c.JSON(http.StatusOK, out)
}

// probeStatus asks the candidate at url for its /v1/cluster/status with the
// caller's Authorization header.
func (s *Server) probeStatus(ctx context.Context, url, auth string) (wire.ClusterStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, overviewProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/v1/cluster/status", nil)
	if err != nil {
		return wire.ClusterStatus{}, err
	}
	req.Header.Set("Authorization", auth)
	resp, err := s.client.Do(req)
	if err != nil {
		return wire.ClusterStatus{}, fmt.Errorf("unreachable: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, 1<<20)
	if resp.StatusCode != http.StatusOK {
		var e wire.Error
		if json.NewDecoder(body).Decode(&e) == nil && e.Message != "" {
			return wire.ClusterStatus{}, fmt.Errorf("answered %d: %s", resp.StatusCode, e.Message)
		}
		return wire.ClusterStatus{}, fmt.Errorf("answered %s", resp.Status)
	}
	var st wire.ClusterStatus
	if err := json.NewDecoder(body).Decode(&st); err != nil {
		return wire.ClusterStatus{}, fmt.Errorf("unreadable status: %w", err)
	}
	return st, nil
}

// unwrapURLError drops the method and URL net/http wraps a transport error in.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
