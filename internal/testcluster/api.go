package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/elanous/elanous-node/wire"
)

// get GETs base+path (with token's bearer authorization when token is not
// "") and returns a 200 answer's body, read up to limit bytes.
func get(ctx context.Context, hc *http.Client, base, path, token string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: %w", base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s%s: status %d: %s", base, path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// getJSON is get of a JSON answer (up to 1 MiB) decoded into out.
func getJSON(ctx context.Context, hc *http.Client, base, path, token string, out any) error {
	body, err := get(ctx, hc, base, path, token, 1<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode GET %s%s %q: %w", base, path, body, err)
	}
	return nil
}

// Metrics reads GET /metrics on base (Prometheus text, up to 8 MiB), with
// token's authorization when token is not "" (http.metrics_auth).
func Metrics(ctx context.Context, hc *http.Client, base, token string) (string, error) {
	body, err := get(ctx, hc, base, "/metrics", token, 8<<20)
	return string(body), err
}

// Primary reads GET /v1/primary on base without a token, as members do.
func Primary(ctx context.Context, hc *http.Client, base string) (wire.Primary, error) {
	var p wire.Primary
	err := getJSON(ctx, hc, base, "/v1/primary", "", &p)
	return p, err
}

// Status reads GET /v1/cluster/status on base with token (the query token
// or a stronger one).
func Status(ctx context.Context, hc *http.Client, base, token string) (wire.ClusterStatus, error) {
	var st wire.ClusterStatus
	err := getJSON(ctx, hc, base, "/v1/cluster/status", token, &st)
	return st, err
}

// Statuses reads every base's status concurrently; one that did not answer
// has a nil entry.
func Statuses(ctx context.Context, hc *http.Client, bases []string, token string) []*wire.ClusterStatus {
	out := make([]*wire.ClusterStatus, len(bases))
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := Status(ctx, hc, base, token); err == nil {
				out[i] = &st
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader is the index of the status that says it leads and is ready (the
// highest term among those that do), or -1.
func Leader(statuses []*wire.ClusterStatus) int {
	best, term := -1, uint64(0)
	for i, st := range statuses {
		if st != nil && st.State == "Leader" && st.Ready && st.Term >= term {
			best, term = i, st.Term
		}
	}
	return best
}

// AgreedPrimary reads /v1/primary on every base and returns the claim when
// all answer known:true with one holder and one generation; otherwise an
// error saying who answered what.
func AgreedPrimary(ctx context.Context, hc *http.Client, bases []string) (wire.Primary, error) {
	if len(bases) == 0 {
		return wire.Primary{}, errors.New("no node is running")
	}
	var agreed *wire.Primary
	for _, base := range bases {
		p, err := Primary(ctx, hc, base)
		switch {
		case err != nil:
			return wire.Primary{}, err
		case !p.Known:
			return wire.Primary{}, fmt.Errorf("%s knows no primary: %+v", base, p)
		case agreed != nil && (agreed.Holder != p.Holder || agreed.Generation != p.Generation):
			return wire.Primary{}, fmt.Errorf("%s says %+v, another node %+v", base, p, *agreed)
		}
		agreed = &p
	}
	return *agreed, nil
}

// NewestPrimary returns the known claim of the highest generation among the
// bases that answer /v1/primary, or an error when none knows one.
func NewestPrimary(ctx context.Context, hc *http.Client, bases []string) (wire.Primary, error) {
	var best *wire.Primary
	for _, base := range bases {
		p, err := Primary(ctx, hc, base)
		if err != nil || !p.Known || (best != nil && p.Generation < best.Generation) {
			continue
		}
		best = &p
	}
	if best == nil {
		return wire.Primary{}, errors.New("no candidate knows the primary")
	}
	return *best, nil
}
