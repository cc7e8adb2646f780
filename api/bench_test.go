package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// benchCluster is a three-node loopback cluster (raft over TCP, boltdb on
// disk) that sweeps only at a due expiry, so the log carries only the
// benchmark's commands.
func benchCluster(b *testing.B) *apitest.Cluster {
	opts := clusterOptions()
	opts.Sweep = time.Hour
	return apitest.Start(b, opts)
}

func reportOpsPerSec(b *testing.B, ops int) {
	b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "ops/s")
}

// renewParallel runs 16 goroutines per GOMAXPROCS, each renewing with the
// function setup gives it until the benchmark ends (the first error fails
// the benchmark and ends that goroutine), then reports the renewals per
// second and releases every lease of c.
func renewParallel(b *testing.B, c *apitest.Cluster, setup func() (renew func() error, err error)) {
	b.SetParallelism(16)
	var ops atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		renew, err := setup()
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := renew(); err != nil {
				b.Error(err)
				return
			}
			ops.Add(1)
		}
	})
	reportOpsPerSec(b, int(ops.Load()))
	b.StopTimer()
	releaseAll(b, c)
}

// cpuTime is the CPU time (user and system) this process has used: the
// whole cluster and its clients, which all run in it.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPUPerOp reports the CPU time the process used per op since start:
// on a shared machine it moves less with the neighbours' load than ops/s.
func reportCPUPerOp(b *testing.B, start time.Duration, ops int) {
	if ops > 0 {
		b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(ops), "cpu-µs/op")
	}
}

// proposeAcquire acquires a lease through Propose for machine bench-owner
// (each owner its own machine, under limits.leases_per_machine); safe on
// any goroutine.
func proposeAcquire(node *cluster.Node, owner string, n int64) (fsm.PortLease, error) {
	res, err := node.Propose(context.Background(), fsm.AcquireLease{
		Caller: fsm.Caller{Owner: owner}, LeaseID: fmt.Sprintf("bench-%s-%d", owner, n), Machine: "bench-" + owner,
		Purpose: "bench", TTLMs: memberTTL, BandStart: bandStart, BandEnd: bandEnd,
	})
	if err != nil {
		return fsm.PortLease{}, fmt.Errorf("Propose(AcquireLease): %w", err)
	}
	return res.Value.(fsm.PortLease), nil
}

// BenchmarkPropose_ThreeNodeTCP measures cluster.Node.Propose on the leader:
// each op is one command stamped, replicated to a quorum over TCP, fsynced by
// boltdb and applied.
func BenchmarkPropose_ThreeNodeTCP(b *testing.B) {
	c := benchCluster(b)
	node := c.Nodes[c.Leader()].Node
	ctx := context.Background()
	var seq atomic.Int64

	b.Run("renew", func(b *testing.B) {
		l, err := proposeAcquire(node, "renew", seq.Add(1))
		if err != nil {
			b.Fatal(err)
		}
		cmd := fsm.RenewLease{Caller: fsm.Caller{Owner: "renew"}, Port: l.Port, LeaseID: l.LeaseID}
		b.ResetTimer()
		for range b.N {
			if _, err := node.Propose(ctx, cmd); err != nil {
				b.Fatalf("Propose(RenewLease) error = %v", err)
			}
		}
		reportOpsPerSec(b, b.N)
		b.StopTimer()
		releaseAll(b, c)
	})

	// Each op is two proposals: an acquire and its release.
	b.Run("acquire+release", func(b *testing.B) {
		for range b.N {
			l, err := proposeAcquire(node, "cycle", seq.Add(1))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := node.Propose(ctx, fsm.ReleaseLease{Caller: fsm.Caller{Owner: "cycle"}, Port: l.Port, LeaseID: l.LeaseID}); err != nil {
				b.Fatalf("Propose(ReleaseLease) error = %v", err)
			}
		}
		b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "proposals/s")
	})

	// 32 concurrent owners renewing their own leases: raft batches them.
	b.Run("renew-parallel", func(b *testing.B) {
		renewParallel(b, c, func() (func() error, error) {
			owner := fmt.Sprintf("p%d", seq.Add(1))
			l, err := proposeAcquire(node, owner, seq.Add(1))
			if err != nil {
				return nil, err
			}
			cmd := fsm.RenewLease{Caller: fsm.Caller{Owner: owner}, Port: l.Port, LeaseID: l.LeaseID}
			return func() error {
				if _, err := node.Propose(ctx, cmd); err != nil {
					return fmt.Errorf("Propose(RenewLease) error = %v", err)
				}
				return nil
			}, nil
		})
	})
}

// BenchmarkHTTP_LeaseRenew measures POST /v1/leases/port/{port}/heartbeat as
// the TypeScript client sends it (no body, x-port-lease-id), through the
// leader and through a follower (which forwards to the leader).
func BenchmarkHTTP_LeaseRenew(b *testing.B) {
	c := benchCluster(b)
	leader, follower := c.Nodes[c.Leader()], c.Nodes[c.Follower()]
	member := c.Tokens.Member
	// Each lease is on a machine of its own: a machine holds at most
	// limits.leases_per_machine leases, fewer than the parallel clients.
	var machines atomic.Int64
	acquireHTTP := func(url string) (testutil.Call, error) {
		machine := fmt.Sprintf("bench-%d", machines.Add(1))
		r, err := testutil.Do(testutil.JSONCall(http.MethodPost, url+"/v1/leases/port", member, wire.AcquireRequest{Machine: machine, Purpose: "http", TTLMs: memberTTL}))
		if err != nil || r.Status != http.StatusCreated {
			return testutil.Call{}, fmt.Errorf("acquire = %v %v, want 201", r, err)
		}
		var l wire.PortLease
		if err := testutil.StrictUnmarshal(r.Body, &l); err != nil {
			return testutil.Call{}, err
		}
		return leaseCall(http.MethodPost, url, l.Port, member, l.LeaseID), nil
	}
	heartbeat := func(cl testutil.Call) error {
		r, err := testutil.Do(cl)
		if err != nil || r.Status != http.StatusOK {
			return fmt.Errorf("lease heartbeat = %v %v, want 200", r, err)
		}
		return nil
	}
	serial := func(b *testing.B, url string) {
		cl, err := acquireHTTP(leader.URL)
		if err != nil {
			b.Fatal(err)
		}
		cl.URL = url + cl.URL[len(leader.URL):]
		b.ResetTimer()
		for range b.N {
			if err := heartbeat(cl); err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSec(b, b.N)
		b.StopTimer()
		releaseAll(b, c)
	}
	b.Run("leader", func(b *testing.B) { serial(b, leader.URL) })
	b.Run("follower", func(b *testing.B) { serial(b, follower.URL) })
	// 32 concurrent clients, each renewing its own lease.
	b.Run("leader-parallel", func(b *testing.B) {
		renewParallel(b, c, func() (func() error, error) {
			cl, err := acquireHTTP(leader.URL)
			if err != nil {
				return nil, err
			}
			return func() error { return heartbeat(cl) }, nil
		})
	})
}

// BenchmarkHTTP_ResourceHeartbeat measures POST /v1/resources/{id}/heartbeat
// as a fleet sends it: 32 clients spread over the three nodes (two thirds of
// them through a follower, which forwards), each heartbeating its own
// resource. Run it with -cpuprofile to see where a heartbeat's time goes.
func BenchmarkHTTP_ResourceHeartbeat(b *testing.B) {
	c := benchCluster(b)
	token := c.Tokens.Member
	const clients = 32
	calls := make(chan testutil.Call, clients)
	for i := range clients {
		node := c.Nodes[i%len(c.Nodes)]
		id := fmt.Sprintf("instance:bench/%d", i)
		testutil.Expect(b, testutil.JSONCall(http.MethodPost, node.URL+"/v1/resources/register", token,
			wire.RegisterRequest{ID: id, Kind: "instance", Name: id, Machine: "bench", TTLMs: memberTTL}), http.StatusOK)
		calls <- testutil.JSONCall(http.MethodPost, node.URL+"/v1/resources/"+member.EscapeID(id)+"/heartbeat", token, struct{}{})
	}
	var ops atomic.Int64
	leader := c.Nodes[c.Leader()].Node
	reg := prometheus.NewRegistry()
	reg.MustRegister(leader.Collector())
	figures := func() (batches, commands, barriers, told float64) {
		r := registries{reg}
		return r.metric(b, 0, "elanous_batches_total"), r.metric(b, 0, "elanous_batched_commands_total"),
			r.metric(b, 0, "elanous_commit_announcements_total", "via", "barrier"),
			r.metric(b, 0, "elanous_commit_announcements_total", "via", "direct")
	}
	batches0, commands0, announced0, told0 := figures()
	index0 := leader.Raft().LastIndex()
	b.SetParallelism((clients + 1) / 2) // GOMAXPROCS is 2 here
	cpu0 := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cl := <-calls
		for pb.Next() {
			r, err := testutil.Do(cl)
			if err != nil || r.Status != http.StatusOK {
				b.Errorf("heartbeat = %v %v, want 200", r, err)
				return
			}
			ops.Add(1)
		}
	})
	reportOpsPerSec(b, int(ops.Load()))
	reportCPUPerOp(b, cpu0, int(ops.Load()))
	batches, commands, announced, told := figures()
	if n := batches - batches0; n > 0 {
		b.ReportMetric((commands-commands0)/n, "commands/batch")
	}
	b.ReportMetric(float64(leader.Raft().LastIndex()-index0)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric((announced-announced0)/b.Elapsed().Seconds(), "announcements/s")
	b.ReportMetric((told-told0)/b.Elapsed().Seconds(), "told/s")
}
