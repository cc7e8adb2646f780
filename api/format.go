package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
)

// health is the body of GET /v1/health. FormatLevel is the highest format
// level this build knows (fsm.MaxFormat): a leader raises the cluster's level
// only once every server reports at least that level. A build that does not
// report one knows level 1.
type health struct {
	Status      string `json:"status"`
	Machine     string `json:"machine"`
	FormatLevel int    `json:"formatLevel"`
	// AppliedIndex and LastContactMs are how far this node has applied the
	// log and when it last heard from a leader (-1 never): the leader's
	// membership maintenance promotes a new server once they show it caught
	// up (see probeHealth).
	AppliedIndex  uint64 `json:"appliedIndex"`
	LastContactMs *int64 `json:"lastContactMs,omitempty"`
	// LastLogTerm and LastLogIndex are this node's last Raft log entry:
	// after a leader's process dies, the survivors compare them to agree on
	// which of them stands last, and wins (cluster's fast failover).
	LastLogTerm  *uint64 `json:"lastLogTerm,omitempty"`
	LastLogIndex *uint64 `json:"lastLogIndex,omitempty"`
}

// fetchHealth GETs candidate c's /v1/health over the forwarding client and
// decodes it: the one probe behind the cluster's FormatProbe (probeFormat)
// and HealthProbe (probeHealth).
func (s *Server) fetchHealth(ctx context.Context, c cluster.Candidate) (health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.URL, "/")+"/v1/health", nil)
	if err != nil {
		return health{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return health{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return health{}, errors.New(resp.Status)
	}
	var h health
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h); err != nil {
		return health{}, err
	}
	return h, nil
}

// probeFormat asks candidate c's /v1/health which format level its build
// knows. It is the cluster's FormatProbe.
func (s *Server) probeFormat(ctx context.Context, c cluster.Candidate) (int, error) {
	h, err := s.fetchHealth(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("ask %s for its format level: %w", c.Machine, err)
	}
	if h.FormatLevel < 1 {
		return 1, nil
	}
	return h.FormatLevel, nil
}

// formatLevel is this build's highest format level.
const formatLevel = fsm.MaxFormat
