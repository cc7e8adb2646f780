package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// Errors of membership changes (AddPeer, RemovePeer, PromotePeer,
// DemotePeer). Besides these they return ErrNotLeader, ErrNoLeader and
// ErrNotReady (nothing changed), ErrOutcomeUnknown, and fsm.ErrInvalidCommand
// for an entry the directory would refuse (nothing changed).
var (
	// ErrQuorumAtRisk is returned, and nothing is changed, when a removal or
	// demotion would leave a voter set whose reachable members are not a
	// majority of it (or no voter at all). force overrides the first case.
	ErrQuorumAtRisk = errors.New("the change would lose the quorum")
	// ErrPeerExists is returned by AddPeer, and nothing is changed, when
	// another server has the name at another Raft address, or another
	// machine has the Raft address or the URL.
	ErrPeerExists = errors.New("a server with that name or address exists")
	// ErrUnknownPeer is returned when the machine is not a server of the Raft
	// configuration (nor, for RemovePeer, an entry of the directory).
	ErrUnknownPeer = errors.New("no such server")
	// ErrDirectoryFormat is returned by AddPeer while the cluster's format
	// level is below 2: the replicated candidate directory does not exist
	// yet (a server still runs an older build).
	ErrDirectoryFormat = errors.New("the candidate directory needs format level 2")
)

// Suffrages of a Peer.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
	// SuffrageNone marks a directory entry that is not a server of the Raft
	// configuration (left behind by an interrupted change; the leader drops
	// it).
	SuffrageNone = "none"
)

// PeerSpec is a server to add: its name, HTTP URL (an origin in normal form)
// and Raft address. A Nonvoter stays a non-voter; otherwise the leader
// promotes it once it has caught up.
type PeerSpec struct {
	Machine  string
	URL      string
	Raft     string
	Nonvoter bool
}

// Peer is one server as this node sees it: its entry (directory, Raft
// configuration, configured candidates for the URL), whether it votes now
// and whether it is meant to.
type Peer struct {
	Candidate
	// Suffrage is SuffrageVoter, SuffrageNonvoter or SuffrageNone.
	Suffrage string
	// WantVoter is the directory's intent: a non-voter that wants to vote is
	// promoted by the leader once caught up; a voter that does not is
	// demoted. Without a directory entry it follows Suffrage.
	WantVoter bool
	// InDirectory reports whether the replicated directory lists it.
	InDirectory bool
	// Leader marks the server this node believes leads.
	Leader bool
	// AddedAt is when the directory got the entry (cluster time, Unix ms).
	AddedAt int64
	// Health is the leader's latest probe of the server; nil on a node that
	// does not lead.
	Health *PeerHealth
}

// ServerHealth is what a HealthProbe learns from a server.
type ServerHealth struct {
	// AppliedIndex is the index of the last entry its state machine applied.
	AppliedIndex uint64
	// LastContact is the time since it last heard from a leader: 0 on a
	// leader, negative when it never did.
	LastContact time.Duration
	// LastLogTerm and LastLogIndex are its last log entry (Node.LastLog),
	// which fast failover compares; LastLogKnown is false for a build that
	// does not report them.
	LastLogTerm  uint64
	LastLogIndex uint64
	LastLogKnown bool
}

// HealthProbe asks the server of candidate c how far it has applied the log
// and when it last heard from a leader (the API layer asks its /v1/health).
// The leader uses it to decide when a new server has caught up and to count
// the reachable voters before a removal.
type HealthProbe func(ctx context.Context, c Candidate) (ServerHealth, error)

// PeerHealth is the leader's view of one server.
type PeerHealth struct {
	// Reachable reports whether the latest probe was answered.
	Reachable bool
	// AppliedIndex and LastContact are the server's answer (see ServerHealth).
	AppliedIndex uint64
	LastContact  time.Duration
	// Lag is how many entries the leader's state machine had applied beyond
	// the server's when it answered.
	Lag uint64
	// ProbedAt is when the answer (or the failure) came.
	ProbedAt time.Time
	// CaughtUpSince is when the server was first seen caught up (lag within
	// MaxLag and in contact with the leader) without a probe since saying
	// otherwise; zero when it is not.
	CaughtUpSince time.Time
}

// members serialises this node's membership changes (the API's and the
// leader's maintenance loop) and keeps the leader's probes of the servers.
type members struct {
	change sync.Mutex // held across one membership change or one maintenance pass

	mu     sync.Mutex
	health map[string]PeerHealth // by machine; guarded by mu; nil while not leading
	term   uint64                // the term health belongs to; guarded by mu
	warned map[string]bool       // servers warned about this term; guarded by mu
}

// SetHealthProbe replaces Config.HealthProbe. Without one every server
// counts as reachable and caught up, as in a cluster of in-memory nodes.
func (n *Node) SetHealthProbe(p HealthProbe) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.healthProbe = p
}

// Peers returns the servers as this node sees them, sorted by machine: every
// server of its latest Raft configuration and every directory entry, with
// the leader's probes when this node leads.
func (n *Node) Peers() []Peer {
	servers := n.raftServers()
	dir := n.fsm.Candidates()
	leader := ""
	if r := n.live.Load(); r != nil {
		_, id := r.LeaderWithID()
		leader = string(id)
	}
	byID := make(map[string]*Peer)
	var out []*Peer
	for _, c := range dir {
		p := &Peer{Candidate: Candidate{Machine: c.Machine, URL: c.URL, Raft: c.Raft},
			Suffrage: SuffrageNone, WantVoter: c.Voter, InDirectory: true, AddedAt: c.AddedAt}
		byID[c.Machine] = p
		out = append(out, p)
	}
	for _, s := range servers {
		id := string(s.ID)
		p, ok := byID[id]
		if !ok {
			p = &Peer{Candidate: Candidate{Machine: id}, WantVoter: s.Suffrage == raft.Voter}
			if conf, ok := n.configured(id); ok {
				p.URL = conf.URL
			}
			byID[id] = p
			out = append(out, p)
		}
		p.Raft = string(s.Address)
		p.Suffrage = suffrageName(s.Suffrage)
	}
	leading := n.IsLeader()
	res := make([]Peer, 0, len(out))
	for _, p := range out {
		p.Leader = p.Machine == leader
		if leading {
			p.Health = n.peerHealth(p.Machine)
		}
		res = append(res, *p)
	}
	slices.SortFunc(res, func(a, b Peer) int { return cmp.Compare(a.Machine, b.Machine) })
	return res
}

// peerHealth returns the leader's view of machine: a fresh one for itself,
// the latest probe for another server, nil when it was never probed.
func (n *Node) peerHealth(machine string) *PeerHealth {
	if machine == n.cfg.ID {
		now := time.Now()
		return &PeerHealth{Reachable: true, AppliedIndex: n.fsm.AppliedIndex(), ProbedAt: now, CaughtUpSince: now}
	}
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	h, ok := n.members.health[machine]
	if !ok {
		return nil
	}
	return &h
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return SuffrageVoter
	case raft.Nonvoter:
		return SuffrageNonvoter
	}
	return strings.ToLower(s.String())
}

// PeerChange is the outcome of a membership change.
type PeerChange struct {
	// Peer is the server after the change (zero after a removal).
	Peer Peer
	// Created reports that AddPeer added a new server (false when it was
	// already one and at most its entry was brought up to date).
	Created bool
	// Index is a log index that, once applied by a node, makes its reads
	// show the change (the last directory command's, or the change's own).
	Index uint64
}

// AddPeer adds a server on the leader: a new machine joins the Raft
// configuration as a non-voter (raft.AddNonvoter), then its directory entry
// is written (PutCandidate) with the intent to vote unless spec.Nonvoter;
// the leader's maintenance promotes it once it has caught up. Adding a
// server that exists at the same Raft address only brings its directory
// entry (URL) up to date. Errors: see the package's membership errors.
func (n *Node) AddPeer(ctx context.Context, spec PeerSpec) (PeerChange, error) {
	l, err := n.readyLeadership()
	if err != nil {
		return PeerChange{}, err
	}
	if f := n.fsm.Format(); f < 2 {
		return PeerChange{}, fmt.Errorf("%w (the cluster is at %d: a server runs an older build)", ErrDirectoryFormat, f)
	}
	entry := fsm.Candidate{Machine: spec.Machine, URL: spec.URL, Raft: spec.Raft, Voter: !spec.Nonvoter}
	if err := fsm.CheckCandidate(entry); err != nil {
		return PeerChange{}, err
	}
	n.members.change.Lock()
	defer n.members.change.Unlock()

	var existing *raft.Server
	for _, s := range n.raftServers() {
		switch {
		case string(s.ID) == spec.Machine:
			existing = &s
		case string(s.Address) == spec.Raft:
			return PeerChange{}, fmt.Errorf("%w: %s already has raft address %s", ErrPeerExists, s.ID, s.Address)
		}
	}
	for _, c := range n.Candidates() {
		if c.Machine != spec.Machine && c.URL == spec.URL {
			return PeerChange{}, fmt.Errorf("%w: %s already has url %s", ErrPeerExists, c.Machine, c.URL)
		}
	}
	created := false
	if existing != nil {
		if string(existing.Address) != spec.Raft {
			return PeerChange{}, fmt.Errorf("%w: %s is a server at raft address %s; remove it first to move it", ErrPeerExists, spec.Machine, existing.Address)
		}
		// Keep the intent it has; a voter stays a voter. A non-voter with
		// no directory entry yet is an add that stopped between its two
		// steps: it takes this call's intent.
		entry.Voter = existing.Suffrage == raft.Voter || !spec.Nonvoter
		if old, ok := n.directoryEntry(spec.Machine); ok {
			entry.Voter = old.Voter
		}
	} else {
		future := n.raft.AddNonvoter(raft.ServerID(spec.Machine), raft.ServerAddress(spec.Raft), 0, n.changeTimeout(ctx))
		if err := n.waitChange(ctx, future); err != nil {
			return PeerChange{}, fmt.Errorf("add %s as a non-voter: %w", spec.Machine, err)
		}
		created = true
		n.log.Info("added a non-voter", "server", spec.Machine, "raft", spec.Raft, "url", spec.URL, "voter_when_caught_up", entry.Voter)
	}
	index := n.fsm.Index(fsm.TableCandidates)
	if old, ok := n.directoryEntry(spec.Machine); !ok || old.URL != entry.URL || old.Raft != entry.Raft || old.Voter != entry.Voter {
		applied, err := n.apply(ctx, fsm.PutCandidate{Header: fsm.Header{Now: l.now()}, Candidate: entry}, 0)
		if err != nil {
			return PeerChange{}, fmt.Errorf("record %s in the candidate directory: %w", spec.Machine, err)
		}
		index = applied.Index
	}
	return PeerChange{Peer: n.peer(spec.Machine), Created: created, Index: index}, nil
}

// RemovePeer removes a server on the leader: from the Raft configuration
// (raft.RemoveServer), then from the directory. Removing a voter is refused
// with ErrQuorumAtRisk, and nothing changes, when the voters left that
// answer a probe would not be a majority of the new voter set, unless force
// is set; the last voter is never removed. A directory entry that is not a
// server is simply dropped. The leader may remove itself: it steps down once
// the change commits, and the next leader drops its directory entry.
func (n *Node) RemovePeer(ctx context.Context, machine string, force bool) (PeerChange, error) {
	l, servers, err := n.lockChange()
	if err != nil {
		return PeerChange{}, err
	}
	defer n.members.change.Unlock()

	server, inRaft := findServer(servers, machine)
	_, inDir := n.directoryEntry(machine)
	if !inRaft && !inDir {
		return PeerChange{}, fmt.Errorf("%w: %s", ErrUnknownPeer, machine)
	}
	index := n.fsm.Index(fsm.TableCandidates)
	if inRaft {
		if server.Suffrage == raft.Voter {
			if err := n.checkQuorum(ctx, voters(servers, machine), force); err != nil {
				return PeerChange{}, fmt.Errorf("remove %s: %w", machine, err)
			}
		}
		future := n.raft.RemoveServer(raft.ServerID(machine), 0, n.changeTimeout(ctx))
		if err := n.waitChange(ctx, future); err != nil {
			return PeerChange{}, fmt.Errorf("remove %s from the raft configuration: %w", machine, err)
		}
		index = future.Index()
		n.log.Info("removed a server", "server", machine, "suffrage", suffrageName(server.Suffrage), "forced", force)
	}
	if inDir && inRaft && machine == n.cfg.ID {
		// This node steps down once its removal commits: the next leader
		// drops its directory entry (maintain).
		return PeerChange{Index: index}, nil
	}
	if inDir {
		applied, err := n.apply(ctx, fsm.RemoveCandidate{Header: fsm.Header{Now: l.now()}, Machine: machine}, 0)
		switch {
		case err == nil, errors.Is(err, fsm.ErrNotFound):
			index = max(index, applied.Index)
		case inRaft:
			// The server is gone; its stale entry is dropped by whichever
			// node leads next (maintain).
			n.log.Warn("removed a server but not its directory entry yet", "server", machine, "err", err)
		default:
			return PeerChange{}, fmt.Errorf("remove %s from the candidate directory: %w", machine, err)
		}
	}
	return PeerChange{Index: index}, nil
}

// lockChange, on a ready leader, takes the membership change lock, which the
// caller releases, and returns the leadership and the servers of the Raft
// configuration as of then. On an error it holds no lock.
func (n *Node) lockChange() (*leadership, []raft.Server, error) {
	l, err := n.readyLeadership()
	if err != nil {
		return nil, nil, err
	}
	n.members.change.Lock()
	return l, n.raftServers(), nil
}

// PromotePeer makes a server a voter at once (raft.AddVoter) and records the
// intent in the directory, so the leader keeps it a voter.
func (n *Node) PromotePeer(ctx context.Context, machine string) (PeerChange, error) {
	return n.setSuffrage(ctx, machine, true, false)
}

// DemotePeer makes a voter a non-voter (raft.DemoteVoter) and records the
// intent in the directory, so the leader does not promote it again. It is
// refused like RemovePeer when the voters left would lose the quorum, unless
// force is set.
func (n *Node) DemotePeer(ctx context.Context, machine string, force bool) (PeerChange, error) {
	return n.setSuffrage(ctx, machine, false, force)
}

func (n *Node) setSuffrage(ctx context.Context, machine string, voter, force bool) (PeerChange, error) {
	l, servers, err := n.lockChange()
	if err != nil {
		return PeerChange{}, err
	}
	defer n.members.change.Unlock()

	server, ok := findServer(servers, machine)
	if !ok {
		return PeerChange{}, fmt.Errorf("%w: %s is not a server of the raft configuration", ErrUnknownPeer, machine)
	}
	isVoter := server.Suffrage == raft.Voter
	if !voter && isVoter {
		if err := n.checkQuorum(ctx, voters(servers, machine), force); err != nil {
			return PeerChange{}, fmt.Errorf("demote %s: %w", machine, err)
		}
	}
	index := n.fsm.Index(fsm.TableCandidates)
	// The intent first: if the leader changes before Raft does, the next
	// leader's maintenance finishes the change instead of undoing it.
	if entry, ok := n.directoryEntry(machine); ok && entry.Voter != voter {
		entry.Voter = voter
		applied, err := n.apply(ctx, fsm.PutCandidate{Header: fsm.Header{Now: l.now()}, Candidate: entry}, 0)
		if err != nil {
			return PeerChange{}, fmt.Errorf("record the suffrage of %s: %w", machine, err)
		}
		index = applied.Index
	}
	if voter != isVoter {
		var future raft.IndexFuture
		if voter {
			future = n.raft.AddVoter(server.ID, server.Address, 0, n.changeTimeout(ctx))
		} else {
			future = n.raft.DemoteVoter(server.ID, 0, n.changeTimeout(ctx))
		}
		if err := n.waitChange(ctx, future); err != nil {
			return PeerChange{}, fmt.Errorf("change the suffrage of %s: %w", machine, err)
		}
		n.log.Info("changed a server's suffrage", "server", machine, "voter", voter, "forced", force)
	}
	return PeerChange{Peer: n.peer(machine), Index: index}, nil
}

// peer returns the Peers entry of machine.
func (n *Node) peer(machine string) Peer {
	for _, p := range n.Peers() {
		if p.Machine == machine {
			return p
		}
	}
	return Peer{Candidate: Candidate{Machine: machine}}
}

func findServer(servers []raft.Server, machine string) (raft.Server, bool) {
	for _, s := range servers {
		if string(s.ID) == machine {
			return s, true
		}
	}
	return raft.Server{}, false
}

// voters returns the voters of servers except the one named without.
func voters(servers []raft.Server, without string) []raft.Server {
	var out []raft.Server
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != without {
			out = append(out, s)
		}
	}
	return out
}

// checkQuorum returns ErrQuorumAtRisk unless the voters that answer a probe
// now (this node always counts) are a majority of newVoters. force skips
// the probe, never the refusal of an empty voter set.
func (n *Node) checkQuorum(ctx context.Context, newVoters []raft.Server, force bool) error {
	if len(newVoters) == 0 {
		return fmt.Errorf("%w: no voter would be left", ErrQuorumAtRisk)
	}
	if force {
		return nil
	}
	need := len(newVoters)/2 + 1
	reachable, missing := n.reachable(ctx, newVoters)
	if reachable < need {
		return fmt.Errorf("%w: %d of the %d voters left answer (%s do not), a quorum needs %d; pass force to do it anyway",
			ErrQuorumAtRisk, reachable, len(newVoters), strings.Join(missing, ", "), need)
	}
	return nil
}

// reachable probes the servers (this node counts without a probe) and
// returns how many answered and the names of those that did not.
func (n *Node) reachable(ctx context.Context, servers []raft.Server) (int, []string) {
	type answer struct {
		machine string
		ok      bool
	}
	answers := make(chan answer, len(servers))
	for _, s := range servers {
		go func() {
			machine := string(s.ID)
			if machine == n.cfg.ID {
				answers <- answer{machine, true}
				return
			}
			_, err := n.probeServer(ctx, machine)
			answers <- answer{machine, err == nil}
		}()
	}
	count := 0
	var missing []string
	for range servers {
		a := <-answers
		if a.ok {
			count++
		} else {
			missing = append(missing, a.machine)
		}
	}
	slices.Sort(missing)
	return count, missing
}

// probeServer asks machine's server for its health, within probeTimeout.
func (n *Node) probeServer(ctx context.Context, machine string) (ServerHealth, error) {
	n.mu.Lock()
	probe := n.healthProbe
	n.mu.Unlock()
	if probe == nil {
		return ServerHealth{AppliedIndex: n.fsm.AppliedIndex()}, nil
	}
	c, ok := n.Candidate(machine)
	if !ok || c.URL == "" {
		return ServerHealth{}, fmt.Errorf("no url is known for %s", machine)
	}
	pctx, cancel := context.WithTimeout(ctx, n.probeTimeout())
	defer cancel()
	return probe(pctx, c)
}

// probeTimeout bounds one health probe.
func (n *Node) probeTimeout() time.Duration {
	return max(time.Second, 2*n.cfg.HeartbeatTimeout)
}

// changeTimeout is the enqueue timeout of a configuration change: what is
// left of ctx, or DefaultProposeTimeout.
func (n *Node) changeTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return DefaultProposeTimeout
}

// waitChange waits for a configuration change and maps raft's errors as
// apply does: ErrNotLeader/ErrNoLeader when it surely did not happen,
// ErrOutcomeUnknown when it may have.
func (n *Node) waitChange(ctx context.Context, future raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- future.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, ctx.Err())
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		if _, ok := n.Leader(); ok {
			return ErrNotLeader
		}
		return ErrNoLeader
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrNoLeader, err)
	default:
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
}
