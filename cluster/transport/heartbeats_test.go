package transport

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A heartbeat with a newer term, handled on the transport's fast path, can
// bump the term under a leader mid-dispatch and make two replicas hold
// different entries with the same (index, term) (hashicorp/raft#695), as a
// skewed clock's early election does. Heartbeats must reach the raft main
// loop through Consumer(), never the fast-path handler.
func TestSafeTransport_ClockSkewHeartbeatsOnMainThread(t *testing.T) {
	recvRaw, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	recv := Safe(recvRaw)
	defer recvRaw.Close()
	var fastPath atomic.Bool
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		fastPath.Store(true)
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})
	if _, ok := recv.(raft.WithPreVote); !ok {
		t.Fatalf("Safe() dropped pre-vote support")
	}
	if _, ok := recv.(raft.WithClose); !ok {
		t.Fatalf("Safe() dropped Close")
	}

	send, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	go func() {
		select {
		case rpc := <-recv.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		case <-time.After(5 * time.Second):
		}
	}()
	// An AppendEntries with no entries is what the transport treats as a heartbeat.
	hb := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("node-b"), Addr: []byte(send.LocalAddr())}, Term: 7}
	var resp raft.AppendEntriesResponse
	if err := send.AppendEntries("node-a", recv.LocalAddr(), &hb, &resp); err != nil {
		t.Fatalf("AppendEntries() error = %v", err)
	}
	if fastPath.Load() || !resp.Success {
		t.Fatalf("heartbeat took the fast path = %v, main-loop answer = %+v; want it on Consumer()", fastPath.Load(), resp)
	}
}
