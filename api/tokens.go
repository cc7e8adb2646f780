package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/elanous/elanous-node/api/wire"
	"github.com/elanous/elanous-node/fsm"
	"github.com/labstack/echo/v4"
)

// issueToken draws a machine token, proposes only its SHA-256 and returns the
// token this once. On a follower the request is forwarded before anything is
// drawn that matters: the leader draws its own.
func (s *Server) issueToken(c echo.Context) error {
	var req wire.IssueTokenRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return err
	}
	if !wire.ValidMachine(req.Machine) {
		return badRequest(fmt.Sprintf("machine %q is not a valid machine name", req.Machine))
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return fmt.Errorf("draw token: %w", err)
	}
	token := hex.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	res, handled, err := s.propose(c, fsm.IssueToken{Machine: req.Machine, SHA256: hex.EncodeToString(sum[:])})
	if handled || err != nil {
		return err
	}
	t := res.(fsm.MemberToken)
	s.log.Info("issued machine token", "machine", t.Machine)
	return c.JSON(http.StatusCreated, wire.IssuedToken{Machine: t.Machine, Token: token, IssuedAt: t.IssuedAt})
}

func (s *Server) revokeToken(c echo.Context) error {
	machine, err := pathParam(c, "machine")
	if err != nil {
		return err
	}
	if !wire.ValidMachine(machine) {
		return badRequest(fmt.Sprintf("machine %q is not a valid machine name", machine))
	}
	if _, err := readBody(c); err != nil {
		return err
	}
	_, handled, err := s.propose(c, fsm.RevokeToken{Machine: machine})
	if handled || err != nil {
		return err
	}
	s.log.Info("revoked machine token", "machine", machine)
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listTokens(c echo.Context) error {
	if handled, err := s.prepareRead(c, fsm.TableTokens); handled || err != nil {
		return err
	}
	out := []wire.TokenInfo{}
	for _, t := range s.node.FSM().Tokens() {
		out = append(out, wire.TokenInfo{Machine: t.Machine, IssuedAt: t.IssuedAt})
	}
	return c.JSON(http.StatusOK, out)
}
