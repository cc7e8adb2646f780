package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/fsm"
	"github.com/hashicorp/raft"
)

// BenchmarkPropose_Transport measures concurrent Propose on the leader of a
// three-node cluster with in-memory stores (no fsync), so the transport is
// most of the cost: raft over plain TCP beside raft over mutual TLS.
func BenchmarkPropose_Transport(b *testing.B) {
	for _, withTLS := range []bool{false, true} {
		name := "tcp"
		if withTLS {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			nodes := benchNodes(b, withTLS)
			var leader *Node
			deadline := time.Now().Add(10 * time.Second)
			for leader == nil {
				for _, n := range nodes {
					if _, err := n.readyLeadership(); err == nil {
						leader = n
					}
				}
				if time.Now().After(deadline) {
					b.Fatal("no ready leader")
				}
				time.Sleep(5 * time.Millisecond)
			}
			var seq, ops atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				owner := fmt.Sprintf("o%d", seq.Add(1))
				res, err := leader.Propose(context.Background(), fsm.AcquireLease{Caller: fsm.Caller{Owner: owner}, LeaseID: owner,
					Machine: "bench", Purpose: "bench", TTLMs: 600_000, BandStart: 40000, BandEnd: 40999})
				if err != nil {
					b.Error(err)
					return
				}
				l := res.Value.(fsm.PortLease)
				cmd := fsm.RenewLease{Caller: fsm.Caller{Owner: owner}, Port: l.Port, LeaseID: l.LeaseID}
				for pb.Next() {
					if _, err := leader.Propose(context.Background(), cmd); err != nil {
						b.Error(err)
						return
					}
					ops.Add(1)
				}
			})
			b.ReportMetric(float64(ops.Load())/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

func benchNodes(b *testing.B, withTLS bool) []*Node {
	b.Helper()
	dir := b.TempDir()
	var ca certs.Pair
	if withTLS {
		var err error
		if ca, err = certs.NewCA(time.Now(), 0); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.Cert, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var cands []Candidate
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cands = append(cands, Candidate{Machine: fmt.Sprintf("node-%c", 'a'+i), Raft: addr})
	}
	var nodes []*Node
	for _, c := range cands {
		cfg := Config{ID: c.Machine, Candidates: cands, Bootstrap: true, BindAddr: c.Raft, Advertise: c.Raft,
			HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: 500 * time.Millisecond,
			CommitTimeout: 5 * time.Millisecond, SweepInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
		mem := raft.NewInmemStore()
		cfg.Stores = &Stores{Logs: mem, Stable: mem, Snapshots: raft.NewInmemSnapshotStore()}
		if withTLS {
			pair, err := certs.NewCert(ca, certs.CertRequest{Machine: c.Machine}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			f := certs.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, c.Machine+".pem"), Key: filepath.Join(dir, c.Machine+"-key.pem")}
			if err := os.WriteFile(f.Cert, pair.Cert, 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(f.Key, pair.Key, 0o600); err != nil {
				b.Fatal(err)
			}
			if cfg.TLS, err = certs.Load(f, c.Machine); err != nil {
				b.Fatal(err)
			}
		}
		n, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	b.Cleanup(func() {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.Close(ctx)
			cancel()
		}
	})
	return nodes
}
