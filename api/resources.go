package api

import (
	"net/http"

	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

func (s *Server) registerResource(c echo.Context) error {
	var req wire.RegisterRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return err
	}
	id := identity(c)
	cmd := fsm.RegisterResource{
		Caller: id.Caller(), ID: req.ID, Kind: req.Kind, Name: req.Name, Machine: req.Machine,
		Endpoint: req.Endpoint, Attrs: req.Attrs, ObservedAt: req.ObservedAt, TTLMs: req.TTLMs,
	}
	if err := cmd.Validate(); err != nil {
		return err
	}
	if !id.mayRead(req.Machine) {
		return forbidden("a token of machine " + id.Machine + " cannot register resources of " + req.Machine)
	}
	res, handled, err := s.propose(c, cmd)
	if handled || err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) heartbeatResource(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	var req wire.HeartbeatRequest
	if err := decodeStrict(c, &req, true); err != nil {
		return err
	}
	cmd := fsm.HeartbeatResource{Caller: identity(c).Caller(), ID: id, Attrs: req.Attrs}
	if err := cmd.Validate(); err != nil {
		return err
	}
	res, handled, err := s.propose(c, cmd)
	if handled || err != nil {
		return err
	}
	r := res.(fsm.Resource)
	return c.JSON(http.StatusOK, wire.HeartbeatResponse{ID: r.ID, ExpiresAt: r.ExpiresAt})
}

func (s *Server) deleteResource(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	if err := fsm.ValidateResourceID(id); err != nil {
		return err
	}
	if _, err := readBody(c); err != nil {
		return err
	}
	_, handled, err := s.propose(c, fsm.DeleteResource{Caller: identity(c).Caller(), ID: id})
	if handled || err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listResources(c echo.Context) error {
	if handled, err := s.prepareRead(c, fsm.TableResources); handled || err != nil {
		return err
	}
	id := identity(c)
	machine := c.QueryParam("machine")
	if id.Machine != "" {
		if machine != "" && machine != id.Machine {
			return forbidden("a machine token may list only its own machine's resources")
		}
		machine = id.Machine
	}
	return c.JSON(http.StatusOK, s.node.FSM().Resources(c.QueryParam("kind"), machine))
}

func (s *Server) getResource(c echo.Context) error {
	rid, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	if err := fsm.ValidateResourceID(rid); err != nil {
		return err
	}
	if handled, err := s.prepareRead(c, fsm.TableResources); handled || err != nil {
		return err
	}
	r, ok := s.node.FSM().Resource(rid)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: "no resource " + rid}
	}
	if !identity(c).mayRead(r.Machine) {
		return forbidden("the resource belongs to another machine")
	}
	return c.JSON(http.StatusOK, r)
}
