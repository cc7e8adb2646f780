package api

import (
	"context"
	"fmt"
	"strconv"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// propose proposes cmd on this node, which the write middleware found
// leading, and returns the state machine's result. The answer carries the
// entry's index in X-Elanous-Index: a node that forwarded the request waits to
// apply that index before answering, and the leader announces the commit so
// the wait is short. If leadership moved in the meantime, the request is
// forwarded after all, through the loop the middleware and consistent reads
// share (errForwarded: the answer is written).
//
// On the leader the command is first judged against the applied state
// (cluster.Node.Precheck): a heartbeat, delete, renew or release that would
// be refused, or a register or acquire past a quota, is answered without a
// log entry (once a quorum has confirmed this node still leads).
func (s *Server) propose(c echo.Context, cmd fsm.Command) (any, error) {
	deadline, _ := budgetOf(c)
	pctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	err := s.node.Precheck(pctx, cmd)
	cancel()
	if err != nil {
		return nil, err
	}
	var applied cluster.Applied
	err = s.onLeader(c, func(ctx context.Context) (err error) {
		applied, err = s.node.Propose(ctx, cmd)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.wrote(c, applied.Index)
	return applied.Value, nil
}

// wrote completes the answer of a write whose log entry is index: the
// forwarding node, which waits to apply the entry, is told now that it is
// committed, and X-Elanous-Index carries the index.
func (s *Server) wrote(c echo.Context, index uint64) {
	if from := c.Request().Header.Get(wire.HeaderForwarded); from != "" {
		s.node.AnnounceCommit(from)
	}
	c.Response().Header().Set(wire.HeaderIndex, strconv.FormatUint(index, 10))
}

// proposeAs is propose for a command whose result is a T.
func proposeAs[T any](s *Server, c echo.Context, cmd fsm.Command) (T, error) {
	v, err := s.propose(c, cmd)
	return resultAs[T](v, err, "command %T applied with a %T result, want %T", cmd)
}

// checkedCommand is a command that checks its own fields.
type checkedCommand interface {
	fsm.Command
	Validate() error
}

// proposeFor is proposeAs for a command on the records of machine: a cmd
// that fails Validate is refused, and so, with a 403 saying its token cannot
// act ("register resources of", "lease ports for") on machine, is a caller
// whose token does not cover machine.
func proposeFor[T any](s *Server, c echo.Context, cmd checkedCommand, machine, act string) (T, error) {
	var zero T
	if err := cmd.Validate(); err != nil {
		return zero, err
	}
	if id := identity(c); !id.coversMachine(machine) {
		return zero, forbidden("a token of machine " + id.Machine + " cannot " + act + " " + machine)
	}
	return proposeAs[T](s, c, cmd)
}

// resultAs is v as a T; when err is nil and v is not a T it is an error
// made of mismatch, which formats cmd, v and the T.
func resultAs[T any](v any, err error, mismatch string, cmd fsm.Command) (T, error) {
	res, ok := v.(T)
	if err == nil && !ok {
		err = fmt.Errorf(mismatch, cmd, v, res)
	}
	return res, err
}

// renew answers a heartbeat or lease renewal on any node (cluster.Node.Renew):
// from confirmed state when it covers the renewal, or by proposing it with the
// slack on the leader. A follower forwards the renewals it cannot answer,
// through the loop writes share (errForwarded: the answer is written). A
// renewal that wrote an entry carries its index in X-Elanous-Index, as every
// write does; one answered from the state carries none, and changes nothing a
// blocking query or watcher waits on.
func (s *Server) renew(c echo.Context, cmd fsm.Command) (any, error) {
	var out cluster.Renewed
	err := s.onLeader(c, func(ctx context.Context) (err error) {
		out, err = s.node.Renew(ctx, cmd)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.Wrote {
		s.wrote(c, out.Index)
	}
	return out.Value, nil
}

// renewAs is renew for a command whose result is a T.
func renewAs[T any](s *Server, c echo.Context, cmd fsm.Command) (T, error) {
	v, err := s.renew(c, cmd)
	return resultAs[T](v, err, "renewal %T answered with a %T, want %T", cmd)
}
