package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// maintainMembers runs while this node leads, after its claim, every
// MembershipInterval and whenever the directory changes, until ctx ends (the
// term is over). Each pass (maintainOnce) probes the servers and, from
// format level 2 on, keeps the candidate directory in step with the Raft
// configuration and promotes the non-voters that have caught up — the part
// of Consul's autopilot this cluster needs (ARCHITECTURE.md, "Membership").
func (n *Node) maintainMembers(ctx context.Context, l *leadership) {
	n.members.mu.Lock()
	n.members.health, n.members.term = map[string]PeerHealth{}, l.term
	n.members.warned = map[string]bool{}
	n.members.mu.Unlock()
	defer func() {
		n.members.mu.Lock()
		if n.members.term == l.term { // a later term may have started already
			n.members.health = nil
		}
		n.members.mu.Unlock()
	}()
	tick := time.NewTicker(n.cfg.MembershipInterval)
	defer tick.Stop()
	for {
		_, changed := n.fsm.Watch(fsm.TableCandidates)
		n.maintainOnce(ctx, l)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		}
	}
}

// maintainOnce is one pass of maintainMembers.
func (n *Node) maintainOnce(ctx context.Context, l *leadership) {
	servers := n.raftServers()
	n.probeAll(ctx, servers)
	if ctx.Err() != nil || n.fsm.Format() < 2 {
		return
	}
	n.members.change.Lock()
	defer n.members.change.Unlock()
	servers = n.raftServers() // as of now, under the change lock
	dir := n.fsm.Candidates()
	if len(dir) == 0 {
		n.seedDirectory(ctx, l, servers)
		return
	}
	inDir := make(map[string]fsm.Candidate, len(dir))
	for _, c := range dir {
		inDir[c.Machine] = c
	}
	inRaft := make(map[string]raft.Server, len(servers))
	for _, s := range servers {
		inRaft[string(s.ID)] = s
	}
	// A directory entry whose server is gone (a removal interrupted after
	// the Raft change, a configuration rewritten by recover) is dropped.
	for _, c := range dir {
		if _, ok := inRaft[c.Machine]; !ok {
			n.putDirectory(ctx, l, fsm.RemoveCandidate{Machine: c.Machine}, "dropped a directory entry that is not a server")
		}
	}
	for _, s := range servers {
		id := string(s.ID)
		entry, listed := inDir[id]
		switch {
		case !listed:
			// A server without an entry gets one only if its URL is known.
			if conf, ok := n.configured(id); ok {
				entry = fsm.Candidate{Machine: id, URL: conf.URL, Raft: string(s.Address), Voter: s.Suffrage == raft.Voter}
				n.putDirectory(ctx, l, fsm.PutCandidate{Candidate: entry}, "added a server's directory entry from the configuration")
			} else if n.warnOnce(id) {
				n.log.Warn("a server has no directory entry and no configured url; run peers add for it again", "server", id)
			}
			continue
		case entry.Raft != string(s.Address):
			entry.Raft = string(s.Address)
			n.putDirectory(ctx, l, fsm.PutCandidate{Candidate: entry}, "updated a server's raft address in the directory")
		}
		switch {
		case entry.Voter && s.Suffrage == raft.Nonvoter && n.caughtUpFor(id) >= n.cfg.ServerStabilization:
			future := n.raft.AddVoter(s.ID, s.Address, 0, n.cfg.ClaimTimeout)
			if err := n.waitChange(ctx, future); err != nil {
				n.log.Warn("promote a caught-up non-voter failed", "server", id, "err", err)
			} else {
				n.log.Info("promoted a caught-up non-voter", "server", id)
			}
		case !entry.Voter && s.Suffrage == raft.Voter && id != n.cfg.ID:
			// A demotion whose Raft change was interrupted; finish it if the
			// quorum allows.
			if err := n.checkQuorum(ctx, voters(servers, id), false); err != nil {
				n.log.Warn("demotion of a voter postponed", "server", id, "err", err)
				continue
			}
			if err := n.waitChange(ctx, n.raft.DemoteVoter(s.ID, 0, n.cfg.ClaimTimeout)); err != nil {
				n.log.Warn("demote a voter failed", "server", id, "err", err)
			}
		}
	}
}

// seedDirectory writes the first directory: every server of the Raft
// configuration with the URL of its configured candidate (a server without
// one is left out, with a warning) and its current suffrage as its intent.
func (n *Node) seedDirectory(ctx context.Context, l *leadership, servers []raft.Server) {
	seeded := 0
	for _, s := range servers {
		conf, ok := n.configured(string(s.ID))
		if !ok {
			if n.warnOnce(string(s.ID)) {
				n.log.Warn("cannot seed a server in the candidate directory: no configured url", "server", s.ID)
			}
			continue
		}
		entry := fsm.Candidate{Machine: conf.Machine, URL: conf.URL, Raft: string(s.Address), Voter: s.Suffrage == raft.Voter}
		if n.putDirectory(ctx, l, fsm.PutCandidate{Candidate: entry}, "") {
			seeded++
		}
	}
	if seeded > 0 {
		n.log.Info("seeded the candidate directory from the configuration", "servers", seeded)
	}
}

// putDirectory applies a directory command stamped now; it logs msg (when
// set) on success and a warning on failure, and reports success.
func (n *Node) putDirectory(ctx context.Context, l *leadership, cmd fsm.Command, msg string) bool {
	var machine string
	switch c := cmd.(type) {
	case fsm.PutCandidate:
		c.Now = l.now()
		cmd, machine = c, c.Candidate.Machine
	case fsm.RemoveCandidate:
		c.Now = l.now()
		cmd, machine = c, c.Machine
	}
	if _, err := n.apply(ctx, cmd, n.cfg.ClaimTimeout); err != nil {
		if ctx.Err() == nil {
			n.log.Warn("candidate directory update failed", "server", machine, "err", err)
		}
		return false
	}
	if msg != "" {
		n.log.Info(msg, "server", machine)
	}
	return true
}

// probeAll probes every server but this one at once and records the answers.
func (n *Node) probeAll(ctx context.Context, servers []raft.Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		id := string(s.ID)
		if id == n.cfg.ID {
			continue
		}
		wg.Go(func() {
			h, err := n.probeServer(ctx, id)
			n.recordHealth(id, h, err)
		})
	}
	wg.Wait()
	// Forget servers that left.
	keep := make(map[string]bool, len(servers))
	for _, s := range servers {
		keep[string(s.ID)] = true
	}
	n.members.mu.Lock()
	for id := range n.members.health {
		if !keep[id] {
			delete(n.members.health, id)
		}
	}
	n.members.mu.Unlock()
}

// recordHealth records one probe of machine. A server is caught up when it
// answered, has applied within MaxLag entries of this leader's state machine
// and heard from a leader within the heartbeat timeout.
func (n *Node) recordHealth(machine string, h ServerHealth, err error) {
	now := time.Now()
	applied := n.fsm.AppliedIndex()
	ph := PeerHealth{ProbedAt: now, LastContact: -1}
	if err == nil {
		ph.Reachable, ph.AppliedIndex, ph.LastContact = true, h.AppliedIndex, h.LastContact
		if applied > h.AppliedIndex {
			ph.Lag = applied - h.AppliedIndex
		}
	}
	caughtUp := err == nil && ph.Lag <= n.cfg.MaxLag && h.LastContact >= 0 && h.LastContact <= n.cfg.HeartbeatTimeout
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	if n.members.health == nil {
		return // not leading
	}
	if caughtUp {
		ph.CaughtUpSince = now
		if prev, ok := n.members.health[machine]; ok && !prev.CaughtUpSince.IsZero() {
			ph.CaughtUpSince = prev.CaughtUpSince
		}
	}
	n.members.health[machine] = ph
}

// caughtUpFor returns how long machine has been caught up without a probe
// saying otherwise, and -1 when it is not.
func (n *Node) caughtUpFor(machine string) time.Duration {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	h, ok := n.members.health[machine]
	if !ok || h.CaughtUpSince.IsZero() {
		return -1
	}
	return time.Since(h.CaughtUpSince)
}

// warnOnce reports whether the warning about machine's missing URL is due:
// once per machine and term, not at every pass.
func (n *Node) warnOnce(machine string) bool {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	if n.members.warned == nil || n.members.warned[machine] {
		return false
	}
	n.members.warned[machine] = true
	return true
}
