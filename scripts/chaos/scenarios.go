package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// scenario is one named fault schedule. faults runs while the workload does
// and returns when its context ends (three quarters into the run); the suite
// then heals everything, lets the workload run on, and checks.
type scenario struct {
	name       string
	about      string
	nodes      int  // 0: the --nodes flag
	smallDisks bool // data dirs on small tmpfs mounts
	docker     bool // run as containers from deploy/
	// minDuration is the shortest workload that fits the whole fault
	// schedule in its first three quarters; a shorter --duration is raised.
	minDuration time.Duration
	faults      func(ctx context.Context, e *env) error
	// stableLeader makes any leadership change during the run a violation.
	stableLeader bool
	// tls runs the scenario's cluster with TLS (HTTPS API, mutual TLS Raft);
	// its report row is named "<name>+tls".
	tls bool
	// renewals runs renewal members (workload/renewers.go) beside the
	// clients.
	renewals bool
}

// tlsShort are the scenarios the --short pass runs a second time with TLS,
// so TLS is proven under a leader kill and a partition, not only on the
// happy path.
var tlsShort = []string{"leader-kill", "partition-leader"}

// runName is the scenario's name in the report and its output directory.
func (sc scenario) runName() string {
	if sc.tls {
		return sc.name + "+tls"
	}
	return sc.name
}

func scenarios() []scenario {
	return []scenario{
		{name: "leader-kill", renewals: true, about: "SIGKILL the leader, restart it, again and again", faults: leaderKill},
		{name: "leader-pause", renewals: true, about: "SIGSTOP the leader for 1x, 3x and 10x the election timeout, then SIGCONT", faults: leaderPause, minDuration: 16 * time.Second},
		{name: "partition-leader", renewals: true, about: "cut the leader off from every other node, heal, repeat", faults: partitionLeader},
		{name: "partition-halves", renewals: true, nodes: 5, about: "split five nodes 2|3 (the leader on either side), heal, repeat", faults: partitionHalves},
		{name: "partition-bridge", renewals: true, nodes: 5, about: "two halves that only one bridge node connects", faults: partitionBridge},
		{name: "one-way", renewals: true, about: "drop only the leader's outgoing, then only its incoming packets", faults: oneWay},
		{name: "slow-net", renewals: true, about: "75±50 ms on every packet between nodes, 20% loss", faults: slowNet},
		{name: "restart-all", renewals: true, about: "SIGKILL every node at once, start them again, repeat", faults: restartAll},
		{name: "disk-full", renewals: true, smallDisks: true, about: "fill a follower's data filesystem, restart it while full, free it", faults: diskFull},
		{name: "disk-full-leader", renewals: true, smallDisks: true, about: "fill the leader's data filesystem under writes (its own log write fails while the followers may hold the entries), free it", faults: diskFullLeader},
		{name: "clock-skew", renewals: true, about: "make a node +5 min then one -5 min ahead lead (chaos-build clock offset)", faults: clockSkew, minDuration: 24 * time.Second},
		{name: "rolling-restart", renewals: true, about: "SIGTERM and restart every node in turn under load, the leader last", faults: rollingRestart},
		{name: "abuse", about: "an abusive machine token and a token-less client flood the cluster beside well-behaved members",
			faults: abuseFaults, minDuration: 16 * time.Second, stableLeader: true},
		{name: "fences", about: "SIGSTOP a lease holder until its lease expires and the port goes to another holder; when it wakes its fence is refused by the check and the downstream guard",
			faults: fencesFaults},
		{name: "docker-partition", docker: true, about: "three containers from deploy/ (TLS, as deploy/compose.yaml runs): docker network disconnect and docker pause the leader", faults: dockerFaults},
	}
}

func leaderKill(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		e.logf("kill -9 %s", e.c.Nodes[l].Name)
		e.c.Kill(l)
		if _, err := e.leader(ctx, l); err != nil {
			return err
		}
		e.sleep(ctx, time.Second)
		e.logf("restart %s", e.c.Nodes[l].Name)
		if err := e.c.Start(l); err != nil {
			return err
		}
		e.sleep(ctx, 2*time.Second)
	}
	return ctx.Err()
}

func leaderPause(ctx context.Context, e *env) error {
	for _, k := range []int{1, 3, 10} {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		d := time.Duration(k) * e.s.opt.electionTimeout
		e.logf("SIGSTOP %s for %s (%dx election timeout)", e.c.Nodes[l].Name, d, k)
		e.c.Pause(l)
		e.sleep(context.WithoutCancel(ctx), d)
		e.logf("SIGCONT %s", e.c.Nodes[l].Name)
		e.c.Resume(l)
		if !e.sleep(ctx, 2*time.Second) {
			return ctx.Err()
		}
	}
	return nil
}

// netRounds repeats until ctx ends: find the leader, let cut make the
// round's network fault, hold it, heal, and give the cluster 2 s to settle.
func netRounds(ctx context.Context, e *env, hold time.Duration, cut func(round, leader int) error) error {
	for round := 0; ctx.Err() == nil; round++ {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		if err := cut(round, l); err != nil {
			return err
		}
		e.sleep(ctx, hold)
		e.logf("heal")
		if err := e.net.Heal(); err != nil {
			return err
		}
		e.sleep(ctx, 2*time.Second)
	}
	return ctx.Err()
}

func partitionLeader(ctx context.Context, e *env) error {
	return netRounds(ctx, e, 3*time.Second, func(_, l int) error {
		e.logf("isolate %s", e.c.Nodes[l].Name)
		return e.net.Isolate(l)
	})
}

func partitionHalves(ctx context.Context, e *env) error {
	return netRounds(ctx, e, 3*time.Second, func(round, l int) error {
		perm := rand.Perm(len(e.c.Nodes))
		// Put the leader in the minority on even rounds, the majority on odd ones.
		for i, x := range perm {
			if x == l {
				want := 0
				if round%2 == 1 {
					want = len(perm) - 1
				}
				perm[i], perm[want] = perm[want], perm[i]
			}
		}
		minority, majority := perm[:len(perm)/2], perm[len(perm)/2:]
		e.logf("partition %v | %v", names(e, minority), names(e, majority))
		return e.net.Partition(minority, majority)
	})
}

func partitionBridge(ctx context.Context, e *env) error {
	return netRounds(ctx, e, 4*time.Second, func(_, l int) error {
		// The leader is never the bridge: it sits in one half.
		var others []int
		for i := range e.c.Nodes {
			if i != l {
				others = append(others, i)
			}
		}
		rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		bridge := others[0]
		a := []int{l, others[1]}
		b := others[2:]
		e.logf("bridge %s between %v and %v", e.c.Nodes[bridge].Name, names(e, a), names(e, b))
		return e.net.Partition(a, b)
	})
}

func oneWay(ctx context.Context, e *env) error {
	return netRounds(ctx, e, 3*time.Second, func(round, l int) error {
		if round%2 == 0 {
			e.logf("drop everything %s sends to the other nodes", e.c.Nodes[l].Name)
		} else {
			e.logf("drop everything the other nodes send to %s", e.c.Nodes[l].Name)
		}
		for i := range e.c.Nodes {
			if i == l {
				continue
			}
			var err error
			if round%2 == 0 {
				err = e.net.Block(l, i)
			} else {
				err = e.net.Block(i, l)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func slowNet(ctx context.Context, e *env) error {
	for i := range e.c.Nodes {
		if err := e.net.Delay(i, 75*time.Millisecond, 50*time.Millisecond); err != nil {
			return err
		}
		if err := e.net.Loss(i, 0.2); err != nil {
			return err
		}
	}
	e.logf("every node: 75±50 ms delay, 20%% loss on node-to-node packets")
	<-ctx.Done()
	return ctx.Err()
}

func restartAll(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		e.logf("kill -9 every node")
		for i := range e.c.Nodes {
			e.c.Kill(i)
		}
		e.sleep(context.WithoutCancel(ctx), 500*time.Millisecond)
		e.logf("start every node")
		for i := range e.c.Nodes {
			if err := e.c.Start(i); err != nil {
				return err
			}
		}
		if _, err := e.leader(ctx); err != nil {
			return err
		}
		e.sleep(ctx, 3*time.Second)
	}
	return ctx.Err()
}

func diskFull(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		f := (l + 1) % len(e.c.Nodes)
		n := e.c.Nodes[f]
		e.logf("fill %s's data filesystem", n.Name)
		if err := e.disks.fill(n.DataDir); err != nil {
			return err
		}
		if !e.sleep(ctx, 3*time.Second) {
			return ctx.Err()
		}
		e.logf("restart %s while its disk is full", n.Name)
		e.c.Kill(f)
		if err := e.c.Start(f); err != nil {
			return err
		}
		e.sleep(ctx, 2*time.Second)
		if err := freeDisk(ctx, e, f); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// freeDisk frees node i's data filesystem, starts the node again if it
// exited on the full disk, and gives it 3 s to rejoin.
func freeDisk(ctx context.Context, e *env, i int) error {
	n := e.c.Nodes[i]
	e.logf("free %s's disk", n.Name)
	e.disks.free(n.DataDir)
	if !e.c.Running(i) {
		e.logf("%s exited on the full disk; starting it again", n.Name)
		if err := e.c.Start(i); err != nil {
			return err
		}
	}
	e.sleep(ctx, 3*time.Second)
	return nil
}

// diskFullLeader fills the leader's data filesystem while writes flow. Its
// next log write fails; with raft.parallel_write the followers may already
// hold the entries it was writing, so those writes must come out as
// indeterminate or committed, never as failed ones that happened anyway.
// The leader steps down (or exits); its disk is freed and it rejoins.
func diskFullLeader(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		n := e.c.Nodes[l]
		e.logf("fill %s's data filesystem (it leads)", n.Name)
		if err := e.disks.fill(n.DataDir); err != nil {
			return err
		}
		if !e.sleep(ctx, 3*time.Second) {
			e.disks.free(n.DataDir)
			return ctx.Err()
		}
		if err := freeDisk(ctx, e, l); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// clockSkew makes a node whose wall clock is 5 minutes ahead lead, then one
// 5 minutes behind: the leader reads its wall clock when it wins, so each
// must win an election while skewed. Elections are forced by pausing
// whichever other node leads.
func clockSkew(ctx context.Context, e *env) error {
	for _, skew := range []time.Duration{5 * time.Minute, -5 * time.Minute, 5 * time.Minute} {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		target := (l + 1) % len(e.c.Nodes)
		e.logf("skew %s's wall clock by %s", e.c.Nodes[target].Name, skew)
		if err := e.setClockOffset(target, skew); err != nil {
			return err
		}
		e.sleep(ctx, 200*time.Millisecond)
		for try := 0; try < 8 && ctx.Err() == nil; try++ {
			l, err = e.leader(ctx)
			if err != nil {
				return err
			}
			if l == target {
				break
			}
			e.logf("force an election: pause %s", e.c.Nodes[l].Name)
			e.c.Pause(l)
			_, err = e.leader(ctx, l)
			e.c.Resume(l)
			if err != nil {
				return err
			}
		}
		if l == target {
			e.logf("%s leads with a clock %s off", e.c.Nodes[target].Name, skew)
		}
		if !e.sleep(ctx, 3*time.Second) {
			return ctx.Err()
		}
		if err := e.setClockOffset(target, 0); err != nil {
			return err
		}
	}
	return nil
}

func rollingRestart(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		order := []int{}
		for i := range e.c.Nodes {
			if i != l {
				order = append(order, i)
			}
		}
		order = append(order, l)
		for _, i := range order {
			n := e.c.Nodes[i]
			e.logf("SIGTERM %s", n.Name)
			if !e.c.Stop(i, 10*time.Second) {
				e.note(fmt.Sprintf("%s did not exit within 10s of SIGTERM", n.Name))
			}
			e.sleep(context.WithoutCancel(ctx), 300*time.Millisecond)
			e.logf("start %s", n.Name)
			if err := e.c.Start(i); err != nil {
				return err
			}
			if err := e.waitReady(ctx, i); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

// waitReady polls node i's status until it says ready.
func (e *env) waitReady(ctx context.Context, i int) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := e.c.Status(cctx, i)
		cancel()
		if err == nil && st.Ready {
			return nil
		}
		if !e.sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s not ready within 20s of its start", e.c.Nodes[i].Name)
}

func (e *env) note(s string) {
	e.mu.Lock()
	e.notes = append(e.notes, s)
	e.mu.Unlock()
	e.logf("%s", s)
}

func names(e *env, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, e.c.Nodes[i].Name)
	}
	return out
}
