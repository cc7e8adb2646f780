package member

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/elanous/elanous-node/wire"
)

// The operations routes (admin scope): snapshot save and restore, which
// stream their bodies, and leadership transfer.

// Snapshot asks for a snapshot file (GET /v1/snapshot) and returns its body
// for the caller to read and close; the file's layout is described at
// wire.SnapshotHeader. A non-2xx answer is an *APIError.
func (c *Client) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	resp, err := c.stream(ctx, http.MethodGet, "/v1/snapshot", nil, 0)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// RestoreSnapshot sends a snapshot file of size bytes (PUT /v1/snapshot) and
// returns the restored state's figures once a quorum holds it. The server
// checks the file whole before it acts: a bad one is 400 invalid-snapshot
// and changes nothing.
func (c *Client) RestoreSnapshot(ctx context.Context, file io.Reader, size int64) (wire.RestoreResult, error) {
	var out wire.RestoreResult
	resp, err := c.stream(ctx, http.MethodPut, "/v1/snapshot", file, size)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxBodyBytes)).Decode(&out); err != nil {
		return out, fmt.Errorf("decode PUT /v1/snapshot: %w: %v", ErrInvalidResponse, err)
	}
	return out, nil
}

// TransferLeader asks the cluster to hand leadership to the voter to (any
// other voter when to is empty) and returns the new leader's claim, once it
// is applied on the node that answers.
func (c *Client) TransferLeader(ctx context.Context, to string) (wire.TransferResult, error) {
	return call[wire.TransferResult](ctx, c, request{method: http.MethodPost, path: "/v1/cluster/leader/transfer", body: wire.TransferRequest{To: to}})
}

// stream sends a request whose body (when not nil, of size bytes) is sent as
// it is read and returns the 2xx answer unread; the caller closes its body.
func (c *Client) stream(ctx context.Context, method, path string, body io.Reader, size int64) (*http.Response, error) {
	target, err := c.Target(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, target.URL+path, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", wire.SnapshotContentType)
	}
	if target.Token != "" {
		req.Header.Set("Authorization", "Bearer "+target.Token)
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", method, path, ErrUnreachable, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, readAPIError(resp, nil)
	}
	return resp, nil
}
