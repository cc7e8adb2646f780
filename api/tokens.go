package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// issueToken draws a machine token, proposes only its SHA-256 and returns the
// token this once. It runs on the leader only: a follower forwards the
// request in the write middleware before decoding its body, so the one
// secret drawn is the leader's.
func (s *Server) issueToken(c echo.Context) (wire.IssuedToken, error) {
	var req wire.IssueTokenRequest
	if err := decodeStrict(c, &req, false); err != nil {
		return wire.IssuedToken{}, err
	}
	if !wire.ValidMachine(req.Machine) {
		return wire.IssuedToken{}, badRequest(fmt.Sprintf("machine %q is not a valid machine name", req.Machine))
	}
	auditDetail(c, slog.String("machine", req.Machine))
	var secret [32]byte
	if _, err := io.ReadFull(s.rand, secret[:]); err != nil {
		return wire.IssuedToken{}, fmt.Errorf("draw token: %w", err)
	}
	token := hex.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	t, err := proposeAs[fsm.MemberToken](s, c, fsm.IssueToken{Machine: req.Machine, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return wire.IssuedToken{}, err
	}
	s.log.Info("issued machine token", "machine", t.Machine)
	return wire.IssuedToken{Machine: t.Machine, Token: token, IssuedAt: t.IssuedAt}, nil
}

func (s *Server) revokeToken(c echo.Context) error {
	machine, err := pathParam(c, "machine")
	if err != nil {
		return err
	}
	if !wire.ValidMachine(machine) {
		return badRequest(fmt.Sprintf("machine %q is not a valid machine name", machine))
	}
	auditDetail(c, slog.String("machine", machine))
	if _, err := s.propose(c, fsm.RevokeToken{Machine: machine}); err != nil {
		return err
	}
	s.log.Info("revoked machine token", "machine", machine)
	return nil
}

func (s *Server) listTokens(c echo.Context) ([]wire.TokenInfo, error) {
	if err := s.prepareRead(c, fsm.TableTokens); err != nil {
		return nil, err
	}
	tokens := s.node.FSM().Tokens()
	out := make([]wire.TokenInfo, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, wireTokenInfo(t))
	}
	return out, nil
}
