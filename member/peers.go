package member

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// ListPeers returns GET /v1/cluster/peers: the servers of the cluster
// (query scope; a machine token may read it). With o.Consistent the leader
// answers, with its probe of each server (Peer.Health).
func (c *Client) ListPeers(ctx context.Context, o ReadOptions) ([]wire.Peer, error) {
	return call[[]wire.Peer](ctx, c, request{method: http.MethodGet, path: "/v1/cluster/peers", query: o.query()})
}

// ListPeersBlocking is a blocking GET /v1/cluster/peers?index=N&wait=D: it
// answers once the candidate directory changed after index, or at wait. It
// returns the servers and their X-Elanous-Index.
func (c *Client) ListPeersBlocking(ctx context.Context, index uint64, wait time.Duration) ([]wire.Peer, uint64, error) {
	return blockingGet[[]wire.Peer](ctx, c, "/v1/cluster/peers", index, wait)
}

// AddPeer adds a server (POST /v1/cluster/peers, admin): a non-voter the
// leader promotes once it has caught up, unless r.Nonvoter. It returns the
// server (201 when new, 200 when it was one already: only its URL may have
// been brought up to date).
func (c *Client) AddPeer(ctx context.Context, r wire.AddPeerRequest) (wire.Peer, error) {
	return call[wire.Peer](ctx, c, request{method: http.MethodPost, path: "/v1/cluster/peers", body: r})
}

// RemovePeer removes a server (DELETE /v1/cluster/peers/{machine}, admin).
// A removal that would lose the quorum is a 409 quorum-at-risk unless force.
func (c *Client) RemovePeer(ctx context.Context, machine string, force bool) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/cluster/peers/" + EscapeID(machine), query: forceQuery(force)}, nil)
	return err
}

// PromotePeer makes a server a voter (POST /v1/cluster/peers/{machine}/promote, admin).
func (c *Client) PromotePeer(ctx context.Context, machine string) (wire.Peer, error) {
	return call[wire.Peer](ctx, c, request{method: http.MethodPost, path: "/v1/cluster/peers/" + EscapeID(machine) + "/promote"})
}

// DemotePeer makes a voter a non-voter (POST /v1/cluster/peers/{machine}/demote,
// admin); refused like RemovePeer when it would lose the quorum, unless force.
func (c *Client) DemotePeer(ctx context.Context, machine string, force bool) (wire.Peer, error) {
	return call[wire.Peer](ctx, c, request{method: http.MethodPost, path: "/v1/cluster/peers/" + EscapeID(machine) + "/demote", query: forceQuery(force)})
}

func forceQuery(force bool) url.Values {
	if !force {
		return nil
	}
	return url.Values{"force": {"true"}}
}
