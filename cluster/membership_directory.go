package cluster

import (
	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// This file resolves the candidates: which machines are servers of the
// cluster, at which HTTP URL and Raft address. Every user of a candidate
// (forwarding, /v1/primary's url, the format probe, status, and the Raft TLS
// layer's peer check) goes through Candidates, Candidate or Leader, so the
// rule lives in one place (ARCHITECTURE.md, "Membership").
//
// The source is the replicated candidate directory (fsm.Candidates, format
// 2) once it holds an entry, and Config.Candidates before that (a cluster
// below format 2, a node that has not received the directory yet). Either way
// every server of the node's latest Raft configuration is included: a server
// the directory does not list yet (added to Raft an instant before its
// directory entry) is resolved from Raft's own address, with the URL of the
// configured candidate of that name if there is one. Once the directory holds
// an entry the configuration's list is never consulted for membership, so a
// machine removed with `peers remove` does not come back from a stale config
// file.

// Candidates returns the cluster's current candidates: the directory's
// entries (sorted by machine), or the configured candidates in their order
// before the directory is seeded, followed by any server of the Raft
// configuration that neither lists. It is safe for concurrent use from any
// goroutine, including before New returns (the transport may ask during
// start-up).
func (n *Node) Candidates() []Candidate {
	var out []Candidate
	if dir := n.fsm.Candidates(); len(dir) > 0 {
		out = make([]Candidate, 0, len(dir))
		for _, c := range dir {
			out = append(out, Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft})
		}
	} else {
		out = append(out, n.cfg.Candidates...)
	}
	servers := n.raftServers()
	if len(servers) == 0 {
		return out
	}
	index := make(map[string]int, len(out))
	for i, c := range out {
		index[c.Machine] = i
	}
	for _, s := range servers {
		id, addr := string(s.ID), string(s.Address)
		if i, ok := index[id]; ok {
			// Raft dials the configuration's address: it is the one a peer
			// check must match.
			out[i].Raft = addr
			continue
		}
		c := Candidate{Machine: id, Raft: addr}
		if conf, ok := n.configured(id); ok {
			c.URL = conf.URL
		}
		index[id] = len(out)
		out = append(out, c)
	}
	return out
}

// Candidate returns the current candidate named machine (see Candidates).
func (n *Node) Candidate(machine string) (Candidate, bool) {
	for _, c := range n.Candidates() {
		if c.Machine == machine {
			return c, true
		}
	}
	return Candidate{}, false
}

// Leader returns the candidate this node believes leads, if any. A leader
// whose URL is unknown (a server added to Raft whose directory entry has
// not arrived) is returned with an empty URL.
func (n *Node) Leader() (Candidate, bool) {
	r := n.live.Load()
	if r == nil {
		return Candidate{}, false
	}
	_, id := r.LeaderWithID()
	if id == "" {
		return Candidate{}, false
	}
	return n.Candidate(string(id))
}

// configured returns the entry of Config.Candidates named machine.
func (n *Node) configured(machine string) (Candidate, bool) {
	for _, c := range n.cfg.Candidates {
		if c.Machine == machine {
			return c, true
		}
	}
	return Candidate{}, false
}

// raftServers returns the servers of this node's latest Raft configuration
// (appended, not necessarily committed): none before raft runs, or while a
// node that started without state waits to be added.
func (n *Node) raftServers() []raft.Server {
	r := n.live.Load()
	if r == nil {
		return nil
	}
	future := r.GetConfiguration()
	if future.Error() != nil {
		return nil
	}
	return future.Configuration().Servers
}

// Waiting reports whether this node has no Raft configuration: it started
// without Raft state and without bootstrapping (cluster.bootstrap false), and
// no leader has added it yet. Such a node serves nothing but waits for
// `peers add` on the cluster.
func (n *Node) Waiting() bool {
	return n.live.Load() != nil && len(n.raftServers()) == 0
}

// directoryEntry returns the directory's entry for machine.
func (n *Node) directoryEntry(machine string) (fsm.Candidate, bool) {
	for _, c := range n.fsm.Candidates() {
		if c.Machine == machine {
			return c, true
		}
	}
	return fsm.Candidate{}, false
}
