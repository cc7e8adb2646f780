package api

import (
	"net/http"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

func (s *Server) registerResource(c echo.Context) (wire.Resource, error) {
	var req wire.RegisterRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return wire.Resource{}, err
	}
	cmd := fsm.RegisterResource{
		Caller: identity(c).Caller(), ID: req.ID, Kind: req.Kind, Name: req.Name, Machine: req.Machine,
		Endpoint: req.Endpoint, Attrs: req.Attrs, ObservedAt: req.ObservedAt, TTLMs: req.TTLMs,
	}
	r, err := proposeFor[fsm.Resource](s, c, cmd, req.Machine, "register resources of")
	return wireResource(r), err
}

func (s *Server) heartbeatResource(c echo.Context) (wire.HeartbeatResponse, error) {
	id, err := pathParam(c, "id")
	if err != nil {
		return wire.HeartbeatResponse{}, err
	}
	var req wire.HeartbeatRequest
	if err := decodeStrict(c, &req, true); err != nil {
		return wire.HeartbeatResponse{}, err
	}
	cmd := fsm.HeartbeatResource{Caller: identity(c).Caller(), ID: id, Attrs: req.Attrs}
	if err := cmd.Validate(); err != nil {
		return wire.HeartbeatResponse{}, err
	}
	r, err := renewAs[fsm.Resource](s, c, cmd)
	return wire.HeartbeatResponse{ID: r.ID, ExpiresAt: r.ExpiresAt}, err
}

func (s *Server) deleteResource(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	if err := fsm.ValidateResourceID(id); err != nil {
		return err
	}
	_, err = s.propose(c, fsm.DeleteResource{Caller: identity(c).Caller(), ID: id})
	return err
}

func (s *Server) listResources(c echo.Context) ([]wire.Resource, error) {
	if err := s.prepareRead(c, fsm.TableResources); err != nil {
		return nil, err
	}
	id := identity(c)
	machine := c.QueryParam("machine")
	if id.Machine != "" {
		if machine != "" && machine != id.Machine {
			return nil, forbidden("a machine token may list only its own machine's resources")
		}
		machine = id.Machine
	}
	return wireResources(s.node.FSM().Resources(c.QueryParam("kind"), machine)), nil
}

func (s *Server) getResource(c echo.Context) (wire.Resource, error) {
	rid, err := pathParam(c, "id")
	if err != nil {
		return wire.Resource{}, err
	}
	if err := fsm.ValidateResourceID(rid); err != nil {
		return wire.Resource{}, err
	}
	if err := s.prepareRead(c, fsm.TableResources); err != nil {
		return wire.Resource{}, err
	}
	r, ok := s.node.FSM().Resource(rid)
	if !ok {
		return wire.Resource{}, &Error{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: "no resource " + rid}
	}
	if !identity(c).coversMachine(r.Machine) {
		return wire.Resource{}, forbidden("the resource belongs to another machine")
	}
	return wireResource(r), nil
}
