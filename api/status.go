package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// getPrimary answers who leads. known is true only on the leader with its
// claim applied, or on a follower that heard from that leader within the
// heartbeat timeout and applied its claim; otherwise the last known claim is
// returned with known false. It takes no token; a blocking query without a
// valid one waits at most Limits.AnonymousWaitMs (an authenticated one, wire.MaxBlockingWait).
func (s *Server) getPrimary(c echo.Context) error {
	if c.QueryParam("index") != "" {
		if _, err := s.authenticate(c.Request()); err != nil {
			c.Set(waitCapKey, anonymousWait(s.guard.limits))
		}
	}
	if err := s.block(c, fsm.TablePrimary); err != nil {
		if errors.Is(err, errParked) {
			return nil // answered later, on the connection (park.go)
		}
		return err
	}
	s.readHeaders(c, fsm.TablePrimary)
	p := s.primary() // read after the index header, so the body is at least that new
	c.Response().Header().Set(wire.HeaderGeneration, strconv.FormatUint(p.Generation, 10))
	return c.JSON(http.StatusOK, p)
}

func (s *Server) primary() wire.Primary {
	p := s.node.FSM().Primary()
	out := wire.Primary{Known: s.node.PrimaryKnown(), Holder: p.Holder, Generation: p.Generation}
	if cand, ok := s.node.Candidate(p.Holder); ok {
		out.URL = cand.URL
	}
	return out
}

func (s *Server) getHealth(c echo.Context) error {
	h := health{Status: "ok", Machine: s.node.ID(), FormatLevel: formatLevel}
	s.healthProgress(&h)
	return c.JSON(http.StatusOK, h)
}

// getReady is 200 once a leader is known and its claim is applied here.
func (s *Server) getReady(c echo.Context) error {
	if !s.node.Ready() {
		if s.node.Waiting() {
			return errWaiting
		}
		if _, ok := s.node.Leader(); !ok {
			return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNoLeader, Message: "no leader is known"}
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotReady, Message: "the leader's claim is not applied here yet"}
	}
	s.readHeaders(c, fsm.TablePrimary)
	return c.JSON(http.StatusOK, map[string]any{"ready": true, "machine": s.node.ID(), "generation": s.node.FSM().Primary().Generation})
}

func (s *Server) getMetrics(c echo.Context) error {
	promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}).ServeHTTP(c.Response(), c.Request())
	return nil
}

// clusterStatus reports this node's raft view and the configuration.
func (s *Server) clusterStatus(c echo.Context) error {
	out := s.ownStatus(c.Request().Context())
	s.readHeaders(c, fsm.TablePrimary)
	return c.JSON(http.StatusOK, out)
}

// ownStatus is this node's answer to /v1/cluster/status.
func (s *Server) ownStatus(ctx context.Context) wire.ClusterStatus {
	st := s.node.Status(ctx)
	out := wire.ClusterStatus{
		Machine:       st.ID,
		State:         st.State,
		Term:          st.Term,
		Generation:    st.Primary.Generation,
		Leader:        st.Leader,
		CommitIndex:   st.CommitIndex,
		AppliedIndex:  st.AppliedIndex,
		LastIndex:     st.LastIndex,
		LastContactMs: lastContactMs(st.LastContact),
		Voter:         st.Voter,
		Ready:         st.Ready,
		Configuration: []wire.ServerInfo{},
		Primary: wire.PrimaryClaim{Holder: st.Primary.Holder, Generation: st.Primary.Generation,
			ClaimedAt: st.Primary.ClaimedAt, Index: st.Primary.Index},
		Counts:    wire.Counts{Resources: st.Counts.Resources, Leases: st.Counts.Leases, Tokens: st.Counts.Tokens},
		StateHash: st.StateHash,
		Format:    s.node.FSM().Format(),
		Version:   s.version,
	}
	limits := s.limitsStatus()
	out.Limits = &limits
	if cand, ok := s.node.Candidate(st.ID); ok {
		out.URL = cand.URL
	}
	if cand, ok := s.node.Candidate(st.Leader); ok {
		out.LeaderURL = cand.URL
	}
	for _, srv := range st.Configuration {
		out.Configuration = append(out.Configuration, wire.ServerInfo{Machine: srv.ID, Address: srv.Address, Suffrage: srv.Suffrage})
	}
	if raw, err := json.Marshal(st.Stats); err == nil {
		out.Raft = raw
	}
	return out
}
