package api

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// newLeaseID draws a lease id (a random UUID-shaped string) from the
// server's random source. Only the leader draws one.
func (s *Server) newLeaseID() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(s.rand, b[:]); err != nil {
		return "", fmt.Errorf("draw lease id: %w", err)
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

func (s *Server) acquireLease(c echo.Context) (wire.PortLease, error) {
	var req wire.AcquireRequest
	if err := decodeStrict(c, &req, false); err != nil {
		var ae *Error
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			ae.Code = wire.CodeInvalidPortLease
		}
		return wire.PortLease{}, err
	}
	leaseID, err := s.newLeaseID()
	if err != nil {
		return wire.PortLease{}, err
	}
	cmd := fsm.AcquireLease{
		Caller: identity(c).Caller(), LeaseID: leaseID, Machine: req.Machine, Purpose: req.Purpose,
		TTLMs: req.TTLMs, Excluded: req.Excluded, BandStart: s.band.Start, BandEnd: s.band.End,
		IdempotencyKey: c.Request().Header.Get(wire.HeaderIdempotencyKey),
	}
	l, err := proposeFor[fsm.PortLease](s, c, cmd, req.Machine, "lease ports for")
	return wirePortLease(l), err
}

// leaseTarget reads what lease heartbeat and release share: the {port} in
// the band and the x-port-lease-id header. They carry no body (the write
// middleware has read and bounded whatever came).
func (s *Server) leaseTarget(c echo.Context) (port int, leaseID string, err error) {
	if port, err = s.portParam(c); err != nil {
		return 0, "", err
	}
	if leaseID, err = leaseHeader(c); err != nil {
		return 0, "", err
	}
	return port, leaseID, nil
}

func (s *Server) renewLease(c echo.Context) (wire.LeaseHeartbeatResponse, error) {
	port, leaseID, err := s.leaseTarget(c)
	if err != nil {
		return wire.LeaseHeartbeatResponse{}, err
	}
	l, err := renewAs[fsm.PortLease](s, c, fsm.RenewLease{Caller: identity(c).Caller(), Port: port, LeaseID: leaseID})
	return wire.LeaseHeartbeatResponse{Port: l.Port, LeaseID: l.LeaseID, ExpiresAt: l.ExpiresAt}, err
}

func (s *Server) releaseLease(c echo.Context) error {
	port, leaseID, err := s.leaseTarget(c)
	if err != nil {
		return err
	}
	auditDetail(c, slog.Int("port", port))
	_, err = s.propose(c, fsm.ReleaseLease{Caller: identity(c).Caller(), Port: port, LeaseID: leaseID})
	return err
}

func (s *Server) listLeases(c echo.Context) ([]wire.PortLease, error) {
	if err := s.prepareRead(c, fsm.TableLeases); err != nil {
		return nil, err
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
	return wirePortLeases(leases), nil
}

func (s *Server) getLease(c echo.Context) (wire.PortLease, error) {
	port, err := s.portParam(c)
	if err != nil {
		return wire.PortLease{}, err
	}
	if err := s.prepareRead(c, fsm.TableLeases); err != nil {
		return wire.PortLease{}, err
	}
	l, ok := s.node.FSM().Lease(port)
	if !ok {
		return wire.PortLease{}, &Error{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: fmt.Sprintf("no lease on port %d", port)}
	}
	if !identity(c).coversMachine(l.Machine) {
		return wire.PortLease{}, forbidden("the lease belongs to another machine")
	}
	return wirePortLease(l), nil
}
