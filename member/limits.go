package member

import (
	"context"
	"net/http"

	"github.com/elanous/elanous-node/wire"
)

// Limits returns the cluster's quotas and the target's own limits
// (GET /v1/cluster/limits, query scope).
func (c *Client) Limits(ctx context.Context, o ReadOptions) (wire.LimitsStatus, error) {
	return call[wire.LimitsStatus](ctx, c, request{method: http.MethodGet, path: "/v1/cluster/limits", query: o.query()})
}

// SetLimits replaces the cluster's quotas through the log
// (PUT /v1/cluster/limits, admin scope): a zero field takes its default. It
// returns the limits then in force.
func (c *Client) SetLimits(ctx context.Context, l wire.Limits) (wire.LimitsStatus, error) {
	return call[wire.LimitsStatus](ctx, c, request{method: http.MethodPut, path: "/v1/cluster/limits", body: l})
}
