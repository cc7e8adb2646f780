package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// confirm is POST /v1/cluster/confirm: one confirmation round on the leader,
// shared with every renewal and consistent read waiting on one
// (cluster.Node.Confirm). A node that does not lead forwards the request to
// the leader, as a consistent read does: any leader's confirmation, taken
// after the request arrived, serves the follower that asked (it checks that
// the state it applied holds that leader's claim).
func (s *Server) confirm(c echo.Context) (wire.ConfirmResponse, error) {
	var req wire.ConfirmRequest
	if err := decodeStrict(c, &req, true); err != nil {
		return wire.ConfirmResponse{}, err
	}
	var conf cluster.Confirmation
	err := s.onLeader(c, func(ctx context.Context) (err error) {
		conf, err = s.node.Confirm(ctx)
		return err
	})
	if err != nil {
		return wire.ConfirmResponse{}, err
	}
	if req.Machine != "" && req.Applied < conf.Index {
		// The follower waits to apply up to Index: tell it the commit now.
		s.node.AnnounceCommit(req.Machine)
	}
	return wire.ConfirmResponse{Index: conf.Index, Term: conf.Term, Now: conf.Now}, nil
}

// maxConfirmAnswer bounds the leader's answer to a confirmation.
const maxConfirmAnswer = 4 << 10

// probeConfirm asks the leader to confirm its leadership for the renewals
// waiting on this node, over the forwarding client with the node's weakest
// cluster token. It is the cluster's ConfirmProbe.
func (s *Server) probeConfirm(ctx context.Context, leader cluster.Candidate, applied uint64) (cluster.Confirmation, error) {
	body, err := json.Marshal(wire.ConfirmRequest{Machine: s.node.ID(), Applied: applied})
	if err != nil {
		return cluster.Confirmation{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(leader.URL, "/")+"/v1/cluster/confirm", bytes.NewReader(body))
	if err != nil {
		return cluster.Confirmation{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := s.peerToken.Load(); tok != nil && *tok != "" {
		req.Header.Set("Authorization", "Bearer "+*tok)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return cluster.Confirmation{}, fmt.Errorf("confirm with %s: %w", leader.Machine, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxConfirmAnswer))
	if err != nil {
		return cluster.Confirmation{}, fmt.Errorf("confirm with %s: %w", leader.Machine, err)
	}
	if resp.StatusCode != http.StatusOK {
		return cluster.Confirmation{}, fmt.Errorf("confirm with %s: %s", leader.Machine, resp.Status)
	}
	var out wire.ConfirmResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return cluster.Confirmation{}, fmt.Errorf("confirm with %s: %w", leader.Machine, err)
	}
	return cluster.Confirmation{Index: out.Index, Term: out.Term, Now: out.Now}, nil
}
