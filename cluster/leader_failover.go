package cluster

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/cluster/transport"
	"github.com/hashicorp/raft"
)

// Fast failover (Config.FastFailover; ARCHITECTURE.md, "Time model", "Fast
// failover").
//
// Without it a follower notices a dead leader only when its randomized
// heartbeat timer runs out (hashicorp/raft re-arms it at HT to 2×HT each time
// it fires early, so up to about 3×HT after the last contact), and the first
// survivor to time out is refused by the others, which still follow the dead
// leader ("rejecting pre-vote request since we have a leader"), so it waits
// out its election timer as well.
//
// With it, a follower that sees one of its inbound Raft connections fail
// (transport.OnDrop of the TCP and TLS transports) dials its leader's Raft address. A refused
// connection means nothing listens there: the leader's process is gone. The
// survivors then stand one after the other, in an order they all compute
// alike, the best placed last (electionOrder): each earlier one turns
// candidate, which is the only way a follower forgets its leader, and its own
// pre-vote fails harmlessly; the last one's pre-vote is then granted by them.
// A survivor stands by lowering raft's HeartbeatTimeout (ReloadConfig) to at
// most the time since its last contact, never below the leader lease
// timeout, which raft's own ValidateConfig requires: raft's follower loop,
// notified of a shorter timeout, checks at once and turns candidate by its
// own rule. The configured timeout is restored as soon as a leader is known
// again or this node leads.
//
// A partitioned, paused or unreachable leader, or a dead machine, refuses
// nothing: the dial times out or connects, and raft's timers apply as before.

const (
	// leaderProbeTimeout bounds the dial to the leader's Raft address. A
	// refusal comes back from the peer's kernel within a round trip; a dial
	// that takes longer is no refusal, whatever happens to it afterwards.
	leaderProbeTimeout = 200 * time.Millisecond
	// leaderProbeTries and leaderReprobeDelay: a process killed by a signal
	// has its sockets closed by the kernel one by one, and a survivor that
	// read its connection's end may find the listener still accepting for
	// a moment; a probe that connects (or whose handshake is cut short) is
	// repeated after the delay, a timeout is not.
	leaderProbeTries   = 3
	leaderReprobeDelay = 20 * time.Millisecond
	// leaderProbeGap is the least time between two rounds of probes. A
	// leader that merely closed a pooled connection is probed one round,
	// however many close at once; a drop during the gap is probed right
	// after it.
	leaderProbeGap = 50 * time.Millisecond
	// settleDelay: RPCs the dead leader sent just before dying may still be
	// being written by a survivor for a moment after its connections
	// dropped. The survivors compare their logs after this delay, and a
	// contact later than it proves a leader alive.
	settleDelay = 75 * time.Millisecond
	// figuresTimeout bounds asking the other survivors for their last log
	// entry (their /v1/health); one that has not answered by then is left
	// out of the order. 150 ms leaves a loaded machine (a -race build, other
	// work on its cores) room to answer, and settleDelay + figuresTimeout
	// stays within the default leader lease (250 ms), which the first turn
	// waits for anyway.
	figuresTimeout = 150 * time.Millisecond
	// staggerStep separates the survivors' turns. It must exceed the
	// difference between the instants two survivors see the same death
	// (one network delay plus scheduling, a few ms on a loaded machine) and
	// the time from lowering the timeout to the pre-vote request being sent
	// (raft's main loop may be finishing a disk write). Each survivor before
	// the winner adds one step to the failover.
	staggerStep = 50 * time.Millisecond
	// restorePoll is how often a hurried node checks whether a leader is
	// known again. raft tells of leader changes only through observers and
	// of contacts not at all; polling for the second an election lasts
	// costs nothing.
	restorePoll = 10 * time.Millisecond
)

// failover is the node's fast-failover state.
type failover struct {
	// dial connects to a Raft address as the transport does (with TLS, a
	// full handshake, so a live leader does not log a refused connection);
	// nil when fast failover is off.
	dial func(addr string, timeout time.Duration) (net.Conn, error)
	// kick wakes watchLeaderConns; capacity 1, so drops coalesce.
	kick chan struct{}
	// firstDrop is when the first connection dropped since the last probe
	// (Unix ns; 0: none), so every survivor times its turn from the same
	// instant, the death, and not from when its probe ran.
	firstDrop atomic.Int64

	// hurried and restored count the elections this node hurried and the
	// restores of the configured heartbeat timeout.
	hurried  atomic.Uint64
	restored atomic.Uint64
	mu       sync.Mutex // serialises ReloadConfig's read-modify-write
}

// connDropped is the transports' report that an inbound connection's Read
// failed. It must not block: it runs on the connection's goroutine.
func (n *Node) connDropped() { n.failover.dropped(time.Now()) }

// dropped records a drop at now and wakes watchLeaderConns.
func (f *failover) dropped(now time.Time) {
	f.firstDrop.CompareAndSwap(0, now.UnixNano())
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// take returns the first drop since the last take, and false when there
// was none: several drops at once leave a kick behind after the take that
// answered them all.
func (f *failover) take() (time.Time, bool) {
	first := f.firstDrop.Swap(0)
	if first == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, first), true
}

// watchLeaderConns probes the leader after each connection drop, at most
// one probe in flight and one per leaderProbeGap, and hurries the election
// when the leader's process is gone.
func (n *Node) watchLeaderConns() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.failover.kick:
		}
		seen, ok := n.failover.take()
		if !ok {
			continue
		}
		if d, ok := n.leaderGone(seen); ok {
			n.hurryElection(d)
		}
		if !n.pause(leaderProbeGap) {
			return
		}
	}
}

// leaderDeath is a leader whose process was found gone.
type leaderDeath struct {
	leader string    // its server ID
	term   uint64    // this node's term when its connection dropped
	seen   time.Time // when the first connection dropped
}

// settled is when the survivors' logs no longer move: see settleDelay.
func (d leaderDeath) settled() time.Time { return d.seen.Add(settleDelay) }

// leaderGone probes the leader while this node follows one, and reports
// whether its Raft address refused the connection.
func (n *Node) leaderGone(seen time.Time) (leaderDeath, bool) {
	r := n.raft
	if r.State() != raft.Follower {
		return leaderDeath{}, false
	}
	addr, id := r.LeaderWithID()
	if id == "" || string(id) == n.cfg.ID {
		return leaderDeath{}, false
	}
	d := leaderDeath{leader: string(id), term: r.CurrentTerm(), seen: seen}
	var err error
	for try := range leaderProbeTries {
		if try > 0 && !n.pause(leaderReprobeDelay) {
			return leaderDeath{}, false
		}
		var conn net.Conn
		if conn, err = n.failover.dial(string(addr), leaderProbeTimeout); err == nil {
			_ = conn.Close()
		}
		if transport.ProcessGone(err) {
			return d, true
		}
		if transport.IsTimeout(err) {
			break // a timeout will not turn into a refusal
		}
	}
	n.log.Debug("a raft connection dropped; the leader's address does not refuse connections", "leader", d.leader, "err", err)
	return leaderDeath{}, false
}

// logFigure is one survivor's last log entry, what raft's vote check
// compares.
type logFigure struct {
	machine     string
	term, index uint64
}

// electionOrder returns the order in which the survivors stand, the winner
// last, or nil when they cannot elect anyone without the dead leader.
//
// The survivors are sorted by (last log term, last log index, machine),
// ascending. A survivor that stands is granted the pre-votes of those that
// stood before it (they are candidates, without a leader, and their logs are
// not ahead of its own) and refused by the others, which still follow the
// dead leader; so the first to stand with quorum-1 before it wins. That
// position goes to the survivor with the most up-to-date log, which nobody's
// log check refuses; the quorum-1 lowest stand before it. Any survivor left
// (in a five-voter cluster with one dead, the second best: the order is the
// two lowest, then the best) does not stand and keeps raft's timers.
func electionOrder(figures []logFigure, quorum int) []string {
	if quorum < 1 || len(figures) < quorum {
		return nil
	}
	sorted := slices.Clone(figures)
	slices.SortFunc(sorted, func(a, b logFigure) int {
		return cmp.Or(cmp.Compare(a.term, b.term), cmp.Compare(a.index, b.index), cmp.Compare(a.machine, b.machine))
	})
	order := make([]string, 0, quorum)
	for _, f := range sorted[:quorum-1] {
		order = append(order, f.machine)
	}
	return append(order, sorted[len(sorted)-1].machine)
}

// hurryHeartbeat returns the heartbeat timeout to reload so that raft's
// follower loop, notified, turns candidate at once: at most since (the time
// since its last contact; raft compares since < timeout), below configured
// (raft notifies the follower loop only of a decrease), and at least lease
// (ValidateConfig). false when since is below lease: the follower must wait.
func hurryHeartbeat(since, lease, configured time.Duration) (time.Duration, bool) {
	if since < lease || configured-time.Millisecond < lease {
		return 0, false
	}
	return min(since, configured-time.Millisecond), true
}

// raftView is what decides whether a hurried election is over.
type raftView struct {
	state       raft.RaftState
	leader      string
	term        uint64
	lastContact time.Time
}

func (n *Node) raftView() raftView {
	r := n.raft
	_, id := r.LeaderWithID()
	return raftView{state: r.State(), leader: string(id), term: r.CurrentTerm(), lastContact: r.LastContact()}
}

// over reports whether the hurry for d is over: this node leads (or stopped),
// or it follows a leader again — another one, the same one in a later term
// (it came back and won), or the same one heard from after the logs settled
// (it was alive after all). A candidate, or a follower still naming the dead
// leader, is not done: restoring then would take the shorter timeout away
// before raft's follower loop has turned candidate with it.
func (d leaderDeath) over(v raftView) bool {
	switch v.state {
	case raft.Leader, raft.Shutdown:
		return true
	}
	if v.leader == "" {
		return false
	}
	return v.leader != d.leader || v.term > d.term || v.lastContact.After(d.settled())
}

// hurryElection stands this node in its turn after the death d, then waits
// until the election is over and restores the configured heartbeat timeout.
func (n *Node) hurryElection(d leaderDeath) {
	var voters []string
	for _, s := range n.raftServers() {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	if !slices.Contains(voters, n.cfg.ID) {
		return // a non-voter never stands
	}
	if !n.pauseUntil(d.settled()) {
		return
	}
	figures := n.survivorLogs(voters, d.leader)
	order := electionOrder(figures, len(voters)/2+1)
	rank := slices.Index(order, n.cfg.ID)
	if rank < 0 {
		n.log.Info("the leader's process is gone (its raft address refuses connections); not standing early",
			"leader", d.leader, "order", order, "answered", len(figures), "voters", len(voters))
		return
	}
	lease := n.cfg.LeaderLeaseTimeout
	turn := d.seen.Add(max(lease, settleDelay+figuresTimeout) + time.Duration(rank)*staggerStep)
	n.log.Info("the leader's process is gone (its raft address refuses connections); hurrying the election",
		"leader", d.leader, "order", order, "rank", rank, "in_ms", time.Until(turn).Milliseconds())
	for {
		v := n.raftView()
		if d.over(v) {
			n.log.Info("a leader is known again before this node's turn; not hurrying", "leader", v.leader, "state", v.state.String())
			return
		}
		wait := time.Until(turn)
		if wait <= 0 {
			if v.state != raft.Follower {
				return // raft's own timer made it a candidate already
			}
			since := time.Since(v.lastContact)
			hb, ok := hurryHeartbeat(since, lease, n.cfg.HeartbeatTimeout)
			if ok {
				if err := n.setHeartbeatTimeout(hb); err != nil {
					n.log.Warn("hurry the election failed", "err", err)
					return
				}
				n.failover.hurried.Add(1)
				break
			}
			if since >= lease {
				return // nothing to shorten; New starts no watch for such a node
			}
			wait = lease - since
		}
		if !n.pause(min(wait, restorePoll)) {
			return
		}
	}
	// Back to the configured timeout once the election is over, and at the
	// latest after two whole rounds of raft's own timers: a hurried node
	// that is still a candidate then is waiting for a quorum, which a
	// shorter heartbeat timeout does not bring.
	deadline := time.Now().Add(4 * (n.cfg.HeartbeatTimeout + n.cfg.ElectionTimeout))
	for !d.over(n.raftView()) && time.Now().Before(deadline) {
		if !n.pause(restorePoll) {
			return
		}
	}
	if err := n.setHeartbeatTimeout(n.cfg.HeartbeatTimeout); err != nil {
		n.log.Warn("restore the heartbeat timeout failed", "err", err)
		return
	}
	n.failover.restored.Add(1)
	v := n.raftView()
	n.log.Info("restored the heartbeat timeout", "state", v.state.String(), "leader", v.leader, "term", v.term,
		"after_ms", time.Since(d.seen).Milliseconds())
}

// survivorLogs returns the last log entry of this node and of every other
// voter but the dead leader that answers within figuresTimeout (their
// /v1/health, through the health probe); the others are left out.
func (n *Node) survivorLogs(voters []string, dead string) []logFigure {
	term, index := n.LastLog()
	out := []logFigure{{machine: n.cfg.ID, term: term, index: index}}
	n.mu.Lock()
	probe := n.healthProbe
	n.mu.Unlock()
	if probe == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), figuresTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range voters {
		if id == n.cfg.ID || id == dead {
			continue
		}
		c, ok := n.Candidate(id)
		if !ok || c.URL == "" {
			continue
		}
		wg.Go(func() {
			h, err := probe(ctx, c)
			if err != nil || !h.LastLogKnown {
				n.log.Debug("a survivor's last log entry is unknown; leaving it out of the order", "server", id, "err", err)
				return
			}
			mu.Lock()
			out = append(out, logFigure{machine: id, term: h.LastLogTerm, index: h.LastLogIndex})
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// setHeartbeatTimeout reloads raft's heartbeat timeout, keeping the other
// reloadable fields.
func (n *Node) setHeartbeatTimeout(d time.Duration) error {
	n.failover.mu.Lock()
	defer n.failover.mu.Unlock()
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout = d
	if err := n.raft.ReloadConfig(rc); err != nil {
		return fmt.Errorf("reload raft heartbeat timeout %s: %w", d, err)
	}
	return nil
}

// pause waits d and reports false when the node stops meanwhile.
func (n *Node) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.stop:
		return false
	case <-t.C:
		return true
	}
}

// pauseUntil is pause until t.
func (n *Node) pauseUntil(t time.Time) bool { return n.pause(max(0, time.Until(t))) }
