package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// checkFence answers POST /v1/fences/check {port, fence} (ARCHITECTURE.md,
// "Fences for downstream"): 200 wire.FenceCheck when fence is the fence of
// the port's live lease, 409 wire.StaleFence otherwise (released, expired,
// granted again, never granted), with the live lease's fence when there is
// one. A lease is live while its expiresAt is after the cluster time
// (cluster.Node.ClusterTime): a due lease no Sweep has removed yet is stale,
// as no renewal can revive it.
//
// It is a read, not a write route: by default it is linearizable, confirmed
// as a ReadIndex read is (cluster.Node.ConfirmedRead): the leader confirms
// its leadership with a quorum after the request arrived, and the answering
// node applies every entry committed before that and judges at the leader's
// cluster time. A follower answers from its own state so, as the leader
// would; when it cannot confirm it forwards the request. So no candidate
// calls a fence valid after the leader has moved past it. ?stale=true
// answers from the node's own state and clock (fsm.FSM.LastNow), which may
// lag. A machine token may check only its own machine's leases (403).
func (s *Server) checkFence(c echo.Context) error {
	var req wire.FenceCheckRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return err
	}
	if !wire.ValidPort(req.Port) {
		return badRequest(fmt.Sprintf("port must be 1-%d, not %d", wire.MaxPort, req.Port))
	}
	if req.Fence == 0 {
		return badRequest("fence must be a positive integer (the fence of a port grant)")
	}
	stale, err := boolParam(c, "stale")
	if err != nil {
		return err
	}
	now := s.node.ClusterTime()
	if !stale {
		err := s.onLeader(c, func(ctx context.Context) (err error) {
			now, err = s.node.ConfirmedRead(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	s.readHeaders(c, fsm.TableLeases)
	l, ok := s.node.FSM().Lease(req.Port)
	live := ok && l.ExpiresAt > now
	if live && !identity(c).coversMachine(l.Machine) {
		return forbidden("the lease belongs to another machine")
	}
	if live && l.Fence == req.Fence {
		return c.JSON(http.StatusOK, wire.FenceCheck{
			Valid: true, Port: l.Port, Fence: l.Fence, Generation: l.Generation, Machine: l.Machine, ExpiresAt: l.ExpiresAt,
		})
	}
	body := wire.StaleFence{Error: wire.CodeStaleFence}
	switch {
	case !ok:
		body.Message = fmt.Sprintf("port %d has no live lease (released, expired or never granted)", req.Port)
	case !live:
		body.Message = fmt.Sprintf("the lease on port %d has expired", req.Port)
	case req.Fence < l.Fence:
		body.Message = fmt.Sprintf("port %d was granted again, under fence %d", req.Port, l.Fence)
		body.CurrentFence = l.Fence
	default:
		body.Message = fmt.Sprintf("fence %d was never granted on port %d; its live lease carries fence %d", req.Fence, req.Port, l.Fence)
		body.CurrentFence = l.Fence
	}
	return c.JSON(http.StatusConflict, body)
}
