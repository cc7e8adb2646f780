package transport

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// A dial to node-b must reach a certificate naming node-b: a listener at
// node-b's address presenting node-c's certificate (of the same CA) is
// refused before an RPC is sent, and the dialler logs why.
func TestTLSDialer_RefusesWrongPeerCertificate(t *testing.T) {
	pki := testutil.NewPKI(t)
	addrs := testutil.FreeAddrs(t, 2)
	cands := []Peer{{Machine: "node-a", Raft: addrs[0]}, {Machine: "node-b", Raft: addrs[1]}, {Machine: "node-c", Raft: "127.0.0.1:9"}}
	impostor, err := certs.Load(pki.Issue("node-c"), "node-c")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", addrs[1], impostor.ServerConfig(tls.RequireAndVerifyClientCert))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()

	store, err := certs.Load(pki.Issue("node-a"), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	tr, err := NewTLS(TLSConfig{BindAddr: addrs[0], Advertise: addrs[0], Certs: store,
		Peers: func() []Peer { return cands }, Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		HCLog: RaftLogger(slog.New(slog.DiscardHandler), "node-a")})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	var resp raft.RequestVoteResponse
	err = tr.RequestVote("node-b", raft.ServerAddress(addrs[1]), &raft.RequestVoteRequest{Term: 2}, &resp)
	if err == nil {
		t.Fatal("RequestVote() to an impostor error = nil, want a refused handshake")
	}
	if !strings.Contains(logs.String(), "raft dial refused") || !strings.Contains(logs.String(), "peer=node-b") {
		t.Errorf("log = %q, want a \"raft dial refused\" line naming node-b", logs.String())
	}
	err = tr.RequestVote("node-z", "127.0.0.1:7", &raft.RequestVoteRequest{Term: 2}, &resp)
	if !errors.Is(err, ErrUnknownPeerAddress) {
		t.Errorf("RequestVote() to an address no candidate has error = %v, want %v", err, ErrUnknownPeerAddress)
	}
}

// Heartbeats over the TLS transport reach raft's main loop through
// Consumer, never a fast-path handler (hashicorp/raft#695, see
// mainThreadHeartbeats).
func TestSafeTransport_TLSHeartbeatsOnMainThread(t *testing.T) {
	pki := testutil.NewPKI(t)
	addrs := testutil.FreeAddrs(t, 2)
	cands := []Peer{{Machine: "node-a", Raft: addrs[0]}, {Machine: "node-b", Raft: addrs[1]}}
	open := func(i int) *TLS {
		store, err := certs.Load(pki.Issue(cands[i].Machine), cands[i].Machine)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTLS(TLSConfig{BindAddr: addrs[i], Advertise: addrs[i], Certs: store,
			Peers: func() []Peer { return cands }, Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
			HCLog: RaftLogger(slog.New(slog.DiscardHandler), cands[i].Machine)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	recvRaw, send := open(0), open(1)
	recv := Safe(recvRaw)
	if _, ok := recv.(raft.WithPreVote); !ok {
		t.Fatalf("Safe() dropped pre-vote support")
	}
	var fastPath bool
	var mu sync.Mutex
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		fastPath = true
		mu.Unlock()
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})
	go func() {
		select {
		case rpc := <-recv.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		case <-time.After(5 * time.Second):
		}
	}()
	hb := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("node-b"), Addr: []byte(addrs[1])}, Term: 7}
	var resp raft.AppendEntriesResponse
	if err := send.AppendEntries("node-a", raft.ServerAddress(addrs[0]), &hb, &resp); err != nil {
		t.Fatalf("AppendEntries() error = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fastPath || !resp.Success {
		t.Fatalf("heartbeat took the fast path = %v, main-loop answer = %+v; want it on Consumer()", fastPath, resp)
	}
}
