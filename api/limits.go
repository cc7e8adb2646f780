package api

import (
	"fmt"
	"log/slog"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// getLimits answers GET /v1/cluster/limits: the quotas as set and in force,
// and this node's own limits. ?consistent=true reads them through the
// leader.
func (s *Server) getLimits(c echo.Context) (wire.LimitsStatus, error) {
	if err := s.prepareRead(c, fsm.TablePrimary); err != nil {
		return wire.LimitsStatus{}, err
	}
	return s.limitsStatus(), nil
}

// putLimits answers PUT /v1/cluster/limits (admin): it replaces the quotas
// through the log (a zero or absent field takes its default) and answers
// the limits now in force. A limit below what the state holds refuses new
// records and removes none. Before the cluster reaches format level 2 it is
// 400: an older build would not apply it.
func (s *Server) putLimits(c echo.Context) (wire.LimitsStatus, error) {
	var req wire.Limits
	if err := decodeStrict(c, &req, false); err != nil {
		return wire.LimitsStatus{}, err
	}
	if req.ResourcesPerMachine < 0 || req.LeasesPerMachine < 0 || req.Resources < 0 || req.IdempotencyKeys < 0 {
		return wire.LimitsStatus{}, badRequest(fmt.Sprintf("limits must not be negative (0 takes the default): %+v", req))
	}
	auditDetail(c, slog.Int("resources_per_machine", req.ResourcesPerMachine), slog.Int("leases_per_machine", req.LeasesPerMachine),
		slog.Int("resources", req.Resources), slog.Int("idempotency_keys", req.IdempotencyKeys))
	_, err := s.propose(c, fsm.SetLimits{Limits: fsm.Limits{
		ResourcesPerMachine: req.ResourcesPerMachine, LeasesPerMachine: req.LeasesPerMachine,
		Resources: req.Resources, IdempotencyKeys: req.IdempotencyKeys,
	}})
	if err != nil {
		return wire.LimitsStatus{}, err
	}
	return s.limitsStatus(), nil
}

// limitsStatus reads the quotas from this node's state.
func (s *Server) limitsStatus() wire.LimitsStatus {
	f := s.node.FSM()
	set, eff := f.ConfiguredLimits(), f.Limits()
	node := s.guard.limits
	return wire.LimitsStatus{
		Set: wireLimits(set),
		Effective: wire.Limits{
			ResourcesPerMachine: eff.ResourcesPerMachine, LeasesPerMachine: eff.LeasesPerMachineIn(s.band.Start, s.band.End),
			Resources: eff.Resources, IdempotencyKeys: eff.IdempotencyKeys,
		},
		Enforced: f.Format() >= 2,
		Node:     &node,
	}
}

func wireLimits(l fsm.Limits) wire.Limits {
	return wire.Limits{ResourcesPerMachine: l.ResourcesPerMachine, LeasesPerMachine: l.LeasesPerMachine,
		Resources: l.Resources, IdempotencyKeys: l.IdempotencyKeys}
}
