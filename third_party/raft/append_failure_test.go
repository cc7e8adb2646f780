// Patched (elanous-node): a follower whose StoreLogs fails after it cleared
// a conflicting log suffix (a full disk) accepts the leader's entries once
// its store writes again.

package raft

import (
	"errors"
	"testing"
	"time"
)

func TestRaft_AppendEntriesAfterFailedStoreOfAClearedSuffix(t *testing.T) {
	addrX, transX := NewInmemTransport("")
	addrL, transL := NewInmemTransport("")
	transL.Connect(addrX, transX)
	transX.Connect(addrL, transL)
	servers := []Server{
		{Suffrage: Voter, ID: "x", Address: addrX},
		{Suffrage: Voter, ID: "l", Address: addrL},
		{Suffrage: Voter, ID: "m", Address: "m"},
	}

	conf := inmemConfig(t)
	conf.LocalID = "x"
	// x must stay a follower of l's heartbeats for the whole test.
	conf.HeartbeatTimeout = time.Hour
	conf.ElectionTimeout = time.Hour
	conf.LeaderLeaseTimeout = time.Second
	store := &gatedStore{InmemStore: NewInmemStore()}
	_, snaps := FileSnapTest(t)
	if err := BootstrapCluster(conf, store, store, snaps, transX, Configuration{Servers: servers}); err != nil {
		t.Fatal(err)
	}
	// x led term 2 and wrote entry 5 in it, which no one else holds.
	for i := uint64(2); i <= 4; i++ {
		if err := store.StoreLog(&Log{Index: i, Term: 1, Type: LogCommand, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.StoreLog(&Log{Index: 5, Term: 2, Type: LogCommand, Data: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64(keyCurrentTerm, 2); err != nil {
		t.Fatal(err)
	}
	fsm := &MockFSM{}
	r, err := NewRaft(conf, fsm, store, store, snaps, transX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })

	// l leads term 3 with its own entries 5 and 6 after the common 4.
	leaderLog := map[uint64]*Log{}
	for i := uint64(1); i <= 4; i++ {
		var l Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		leaderLog[i] = &l
	}
	leaderLog[5] = &Log{Index: 5, Term: 3, Type: LogCommand, Data: []byte{5}}
	leaderLog[6] = &Log{Index: 6, Term: 3, Type: LogCommand, Data: []byte{6}}
	send := func(next uint64) AppendEntriesResponse {
		t.Helper()
		prev := leaderLog[next-1]
		a := AppendEntriesRequest{
			RPCHeader:         RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte("l"), Addr: []byte(addrL)},
			Term:              3,
			PrevLogEntry:      prev.Index,
			PrevLogTerm:       prev.Term,
			LeaderCommitIndex: 6,
		}
		for i := next; i <= 6; i++ {
			a.Entries = append(a.Entries, leaderLog[i])
		}
		var resp AppendEntriesResponse
		if err := transL.AppendEntries("x", addrX, &a, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}

	store.mu.Lock()
	store.fail = errors.New("no space left on device")
	store.mu.Unlock()
	if resp := send(5); resp.Success {
		t.Fatal("AppendEntries succeeded while the store fails")
	}
	if got, want := r.LastIndex(), uint64(4); got != want {
		t.Fatalf("after the failed append, raft's last index is %d; the store holds up to %d", got, want)
	}

	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	// The leader's replication rule (replicateTo): on a refusal, go back
	// one entry, or to the follower's last log, and send again.
	next := uint64(5)
	for tries := 0; ; tries++ {
		resp := send(next)
		if resp.Success {
			break
		}
		if tries == 10 {
			t.Fatalf("x refuses the leader's entries for good once its store writes again (last log %d)", resp.LastLog)
		}
		next = max(min(next-1, resp.LastLog+1), 2)
	}
	var l Log
	if err := store.GetLog(5, &l); err != nil || l.Term != 3 {
		t.Fatalf("entry 5 is %+v (%v), want the leader's of term 3", l, err)
	}
	if got := r.LastIndex(); got != 6 {
		t.Fatalf("last index %d, want 6", got)
	}
}
