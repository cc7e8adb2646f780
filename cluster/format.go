package cluster

import (
	"context"
	"time"

	"github.com/elanous/elanous-node/fsm"
)

// FormatProbe asks the server of candidate c which format level its build
// knows (fsm.MaxFormat of that build). An older build that does not say
// knows level 1.
type FormatProbe func(ctx context.Context, c Candidate) (int, error)

// SetFormatProbe sets how the leader learns the other servers' format levels
// (the API layer asks their /v1/health). Without one, every server is assumed
// to run this build, as in a cluster of in-memory nodes.
func (n *Node) SetFormatProbe(p FormatProbe) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probe = p
}

// raiseFormat runs while this node leads, after its claim: until the
// cluster's format level is this build's, it asks every server of the Raft
// configuration which level its build knows and, once the lowest of them is
// above the cluster's, proposes SetFormat with it. A rolling upgrade thus
// moves to the new format only when the last server runs the new build, and a
// server that cannot be asked holds the level where it is
// (ARCHITECTURE.md, "Versioned formats").
func (n *Node) raiseFormat(ctx context.Context, l *leadership) {
	tick := time.NewTicker(n.cfg.FormatCheckInterval)
	defer tick.Stop()
	for {
		current := n.fsm.Format()
		if current >= fsm.MaxFormat {
			return
		}
		if target, ok := n.commonFormat(ctx); ok && target > current {
			cmd := fsm.SetFormat{Header: fsm.Header{Now: l.now()}, Level: target}
			if _, err := n.apply(ctx, cmd, n.cfg.ClaimTimeout); err != nil {
				n.log.Warn("raise format level failed", "from", current, "to", target, "err", err)
			} else {
				n.log.Info("raised the format level", "from", current, "to", target)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// commonFormat returns the lowest format level the servers of the
// configuration know, and false when one of them cannot be asked.
func (n *Node) commonFormat(ctx context.Context) (int, bool) {
	n.mu.Lock()
	probe := n.probe
	n.mu.Unlock()
	future := n.raft.GetConfiguration()
	if future.Error() != nil {
		return 0, false
	}
	level := fsm.MaxFormat
	for _, s := range future.Configuration().Servers {
		if string(s.ID) == n.cfg.ID || probe == nil {
			continue
		}
		c, ok := n.Candidate(string(s.ID))
		if !ok {
			return 0, false
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := probe(pctx, c)
		cancel()
		if err != nil {
			n.log.Debug("format probe failed", "server", c.Machine, "err", err)
			return 0, false
		}
		level = min(level, got)
	}
	return level, true
}
