package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// This file holds the membership routes: GET /v1/cluster/peers (query scope:
// members refresh their candidate list from it) and the admin changes —
// POST /v1/cluster/peers, DELETE /v1/cluster/peers/{machine},
// POST /v1/cluster/peers/{machine}/promote and /demote. The changes are
// write routes: a follower forwards them to the leader before the handler,
// which runs them there (cluster.Node.AddPeer and friends) and answers with
// the index of the directory change, so the forwarding node answers once its
// own reads show it.

// errWaiting answers a request to a node that waits to be added to a
// cluster (cluster.bootstrap false, no Raft state): it serves nothing yet.
var errWaiting = &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeNotReady,
	Message: "this node has no raft state and waits to be added to a cluster: run `elanous-node peers add` against the cluster"}

// membershipErrors maps the cluster's membership errors.
var membershipErrors = errorMap{
	{cluster.ErrQuorumAtRisk, http.StatusConflict, wire.CodeQuorumAtRisk},
	{cluster.ErrPeerExists, http.StatusConflict, wire.CodePeerExists},
	{cluster.ErrDirectoryFormat, http.StatusConflict, wire.CodeFormatTooOld},
	{cluster.ErrUnknownPeer, http.StatusNotFound, wire.CodeNotFound},
}

// membershipError maps err to an *Error when it is a membership error, and
// returns it unchanged otherwise (the error handler maps the rest).
func membershipError(err error) error {
	if ae, ok := membershipErrors.lookup(err); ok {
		return ae
	}
	return err
}

// listPeers answers GET /v1/cluster/peers: every server as this node sees it
// (a blocking query waits on the candidate directory); with
// ?consistent=true the leader answers, with its probes of each server.
func (s *Server) listPeers(c echo.Context) ([]wire.Peer, error) {
	if err := s.prepareRead(c, fsm.TableCandidates); err != nil {
		return nil, err
	}
	peers := s.node.Peers()
	out := make([]wire.Peer, 0, len(peers))
	for _, p := range peers {
		out = append(out, toWirePeer(p))
	}
	return out, nil
}

func toWirePeer(p cluster.Peer) wire.Peer {
	out := wire.Peer{Machine: p.Machine, URL: p.URL, Raft: p.Raft, Suffrage: p.Suffrage, Leader: p.Leader, AddedAt: p.AddedAt,
		Promoting: p.Suffrage == cluster.SuffrageNonvoter && p.WantVoter,
		Demoting:  p.Suffrage == cluster.SuffrageVoter && !p.WantVoter}
	if h := p.Health; h != nil {
		out.Health = &wire.PeerHealth{Reachable: h.Reachable, LastContactMs: lastContactMs(h.LastContact),
			AppliedIndex: h.AppliedIndex, Lag: h.Lag, CaughtUp: !h.CaughtUpSince.IsZero(), ProbedAt: h.ProbedAt.UnixMilli()}
	}
	return out
}

// addPeer answers POST /v1/cluster/peers {machine, url, raft, nonvoter?}:
// 201 with the new server (a non-voter, promoted once caught up unless
// nonvoter), 200 when it was a server already.
func (s *Server) addPeer(c echo.Context) error {
	var req wire.AddPeerRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return err
	}
	auditDetail(c, slog.String("machine", req.Machine), slog.String("url", req.URL), slog.String("raft", req.Raft), slog.Bool("nonvoter", req.Nonvoter))
	if !wire.ValidCandidate(req.Machine) {
		return badRequest(fmt.Sprintf("machine %q must match %s", req.Machine, wire.CandidatePatternText))
	}
	origin, err := wire.ParseOrigin(req.URL)
	if err != nil {
		return badRequest(fmt.Sprintf("url: %v", err))
	}
	spec := cluster.PeerSpec{Machine: req.Machine, URL: origin, Raft: req.Raft, Nonvoter: req.Nonvoter}
	if err := fsm.CheckCandidate(fsm.Candidate{Machine: spec.Machine, URL: spec.URL, Raft: spec.Raft}); err != nil {
		return badRequest(strings.TrimPrefix(err.Error(), fsm.ErrInvalidCommand.Error()+": "))
	}
	change, err := s.changeMembers(c, func(ctx context.Context) (cluster.PeerChange, error) { return s.node.AddPeer(ctx, spec) })
	if err != nil {
		return err
	}
	status := http.StatusOK
	if change.Created {
		status = http.StatusCreated
	}
	s.log.Info("peer added", "machine", spec.Machine, "url", spec.URL, "raft", spec.Raft, "nonvoter", spec.Nonvoter, "created", change.Created)
	return c.JSON(status, toWirePeer(change.Peer))
}

// removePeer answers DELETE /v1/cluster/peers/{machine}[?force=true]: 204.
func (s *Server) removePeer(c echo.Context) error {
	machine, err := peerParam(c)
	if err != nil {
		return err
	}
	force, err := boolParam(c, "force")
	if err != nil {
		return err
	}
	auditDetail(c, slog.String("machine", machine), slog.Bool("force", force))
	if _, err := s.changeMembers(c, func(ctx context.Context) (cluster.PeerChange, error) {
		return s.node.RemovePeer(ctx, machine, force)
	}); err != nil {
		return err
	}
	s.log.Info("peer removed", "machine", machine, "force", force)
	return nil
}

// promotePeer answers POST /v1/cluster/peers/{machine}/promote: 200 with the server.
func (s *Server) promotePeer(c echo.Context) (wire.Peer, error) {
	machine, err := peerParam(c)
	if err != nil {
		return wire.Peer{}, err
	}
	auditDetail(c, slog.String("machine", machine))
	change, err := s.changeMembers(c, func(ctx context.Context) (cluster.PeerChange, error) { return s.node.PromotePeer(ctx, machine) })
	if err != nil {
		return wire.Peer{}, err
	}
	s.log.Info("peer promoted", "machine", machine)
	return toWirePeer(change.Peer), nil
}

// demotePeer answers POST /v1/cluster/peers/{machine}/demote[?force=true]: 200 with the server.
func (s *Server) demotePeer(c echo.Context) (wire.Peer, error) {
	machine, err := peerParam(c)
	if err != nil {
		return wire.Peer{}, err
	}
	force, err := boolParam(c, "force")
	if err != nil {
		return wire.Peer{}, err
	}
	auditDetail(c, slog.String("machine", machine), slog.Bool("force", force))
	change, err := s.changeMembers(c, func(ctx context.Context) (cluster.PeerChange, error) {
		return s.node.DemotePeer(ctx, machine, force)
	})
	if err != nil {
		return wire.Peer{}, err
	}
	s.log.Info("peer demoted", "machine", machine, "force", force)
	return toWirePeer(change.Peer), nil
}

func peerParam(c echo.Context) (string, error) {
	machine, err := pathParam(c, "machine")
	if err != nil {
		return "", err
	}
	if !wire.ValidCandidate(machine) {
		return "", badRequest(fmt.Sprintf("machine %q must match %s", machine, wire.CandidatePatternText))
	}
	return machine, nil
}

// changeMembers runs a membership change on the leader through the loop
// writes share (forwarded if leadership moved meanwhile: errForwarded, the
// answer is written) and sets X-Elanous-Index to the change's index.
func (s *Server) changeMembers(c echo.Context, op func(context.Context) (cluster.PeerChange, error)) (cluster.PeerChange, error) {
	var change cluster.PeerChange
	err := s.onLeader(c, func(ctx context.Context) (err error) {
		change, err = op(ctx)
		return err
	})
	if err != nil {
		return cluster.PeerChange{}, membershipError(err)
	}
	s.wrote(c, change.Index)
	return change, nil
}

// probeHealth asks candidate c's /v1/health how far it has applied the log
// and when it last heard from a leader (fetchHealth). It is the cluster's
// HealthProbe.
func (s *Server) probeHealth(ctx context.Context, c cluster.Candidate) (cluster.ServerHealth, error) {
	h, err := s.fetchHealth(ctx, c)
	if err != nil {
		return cluster.ServerHealth{}, fmt.Errorf("probe %s: %w", c.Machine, err)
	}
	if h.Machine != c.Machine {
		return cluster.ServerHealth{}, fmt.Errorf("probe %s: %s answered", c.Machine, h.Machine)
	}
	// A build that does not report its progress cannot be judged caught up
	// (LastContact -1); one that does not report its last log entry is left
	// out of fast failover's order (LastLogKnown false).
	out := cluster.ServerHealth{AppliedIndex: h.AppliedIndex, LastContact: -1}
	if h.LastContactMs != nil {
		out.LastContact = time.Duration(*h.LastContactMs) * time.Millisecond
	}
	if h.LastLogTerm != nil && h.LastLogIndex != nil {
		out.LastLogTerm, out.LastLogIndex, out.LastLogKnown = *h.LastLogTerm, *h.LastLogIndex, true
	}
	return out, nil
}

// healthProgress fills the progress fields of /v1/health.
func (s *Server) healthProgress(h *health) {
	h.AppliedIndex = s.node.FSM().AppliedIndex()
	ms := lastContactMs(s.node.LastContact())
	h.LastContactMs = &ms
	term, index := s.node.LastLog()
	h.LastLogTerm, h.LastLogIndex = &term, &index
}
