package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

func newLeaseID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("draw lease id: %w", err)
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

func (s *Server) acquireLease(c echo.Context) error {
	var req wire.AcquireRequest
	if err := decodeStrict(c, &req, false); err != nil {
		var ae *Error
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			ae.Code = wire.CodeInvalidPortLease
		}
		return err
	}
	leaseID, err := newLeaseID()
	if err != nil {
		return err
	}
	id := identity(c)
	cmd := fsm.AcquireLease{
		Caller: id.Caller(), LeaseID: leaseID, Machine: req.Machine, Purpose: req.Purpose,
		TTLMs: req.TTLMs, Excluded: req.Excluded, BandStart: s.band.Start, BandEnd: s.band.End,
		IdempotencyKey: c.Request().Header.Get(wire.HeaderIdempotencyKey),
	}
	if err := cmd.Validate(); err != nil {
		return err
	}
	if !id.mayRead(req.Machine) {
		return forbidden("a token of machine " + id.Machine + " cannot lease ports for " + req.Machine)
	}
	res, handled, err := s.propose(c, cmd)
	if handled || err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, res)
}

// leaseTarget reads what lease heartbeat and release share: the {port} in
// the band, the x-port-lease-id header, and the (empty) body kept for a forward.
func (s *Server) leaseTarget(c echo.Context) (port int, leaseID string, err error) {
	if port, err = s.portParam(c); err != nil {
		return 0, "", err
	}
	if leaseID, err = leaseHeader(c); err != nil {
		return 0, "", err
	}
	if _, err = readBody(c); err != nil {
		return 0, "", err
	}
	return port, leaseID, nil
}

func (s *Server) renewLease(c echo.Context) error {
	port, leaseID, err := s.leaseTarget(c)
	if err != nil {
		return err
	}
	res, handled, err := s.propose(c, fsm.RenewLease{Caller: identity(c).Caller(), Port: port, LeaseID: leaseID})
	if handled || err != nil {
		return err
	}
	l := res.(fsm.PortLease)
	return c.JSON(http.StatusOK, wire.LeaseHeartbeatResponse{Port: l.Port, LeaseID: l.LeaseID, ExpiresAt: l.ExpiresAt})
}

func (s *Server) releaseLease(c echo.Context) error {
	port, leaseID, err := s.leaseTarget(c)
	if err != nil {
		return err
	}
	_, handled, err := s.propose(c, fsm.ReleaseLease{Caller: identity(c).Caller(), Port: port, LeaseID: leaseID})
	if handled || err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listLeases(c echo.Context) error {
	if handled, err := s.prepareRead(c, fsm.TableLeases); handled || err != nil {
		return err
	}
	id := identity(c)
	leases := s.node.FSM().Leases()
	if id.Machine != "" {
		own := leases[:0]
		for _, l := range leases {
			if l.Machine == id.Machine {
				own = append(own, l)
			}
		}
		leases = own
	}
	return c.JSON(http.StatusOK, leases)
}

func (s *Server) getLease(c echo.Context) error {
	port, err := s.portParam(c)
	if err != nil {
		return err
	}
	if handled, err := s.prepareRead(c, fsm.TableLeases); handled || err != nil {
		return err
	}
	l, ok := s.node.FSM().Lease(port)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: fmt.Sprintf("no lease on port %d", port)}
	}
	if !identity(c).mayRead(l.Machine) {
		return forbidden("the lease belongs to another machine")
	}
	return c.JSON(http.StatusOK, l)
}
