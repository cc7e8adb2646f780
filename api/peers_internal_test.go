package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/wire"
)

func TestMembershipError(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("remove node-b: %w: 1 of 2 answer", cluster.ErrQuorumAtRisk), http.StatusConflict, wire.CodeQuorumAtRisk},
		{fmt.Errorf("%w: node-b has url x", cluster.ErrPeerExists), http.StatusConflict, wire.CodePeerExists},
		{fmt.Errorf("%w (the cluster is at 1)", cluster.ErrDirectoryFormat), http.StatusConflict, wire.CodeFormatTooOld},
		{fmt.Errorf("%w: node-x", cluster.ErrUnknownPeer), http.StatusNotFound, wire.CodeNotFound},
		{fmt.Errorf("add: %w", cluster.ErrNotLeader), http.StatusServiceUnavailable, wire.CodeNoLeader},
		{fmt.Errorf("add: %w", cluster.ErrOutcomeUnknown), http.StatusServiceUnavailable, wire.CodeOutcomeUnknown},
	}
	for _, tt := range tests {
		status, body := toWire(membershipError(tt.err))
		if status != tt.status || body.Error != tt.code || body.Message == "" {
			t.Errorf("membershipError(%v) = %d %+v, want %d %s", tt.err, status, body, tt.status, tt.code)
		}
	}
	if err := membershipError(nil); err != nil {
		t.Errorf("membershipError(nil) = %v", err)
	}
	var ae *Error
	if errors.As(membershipError(cluster.ErrQuorumAtRisk), &ae) && ae.Message != cluster.ErrQuorumAtRisk.Error() {
		t.Errorf("message = %q, want the cluster's", ae.Message)
	}
}
