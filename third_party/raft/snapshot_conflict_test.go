// Patched (elanous-node): the regression test of the install-snapshot
// conflict check in installSnapshot (hashicorp/raft#697).

package raft

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// A follower whose log conflicts with an installed snapshot (uncommitted
// entries of an old term at the snapshot's index, or a hole there) discards
// its log, so the leader's next AppendEntries, which names the snapshot's
// last entry as the previous one, succeeds instead of sending the snapshot
// again forever.
func TestRaft_InstallSnapshotDiscardsAConflictingLog(t *testing.T) {
	cases := []struct {
		name string
		// stale are the follower's entries after the bootstrap
		// configuration at index 1, all of term 2.
		stale []uint64
		// snapIndex and snapTerm are the installed snapshot's last entry.
		snapIndex, snapTerm uint64
		// wantKept is whether the follower's log survives the install.
		wantKept bool
	}{
		{name: "conflicting term at the snapshot's index", stale: []uint64{2, 3, 4, 5}, snapIndex: 5, snapTerm: 3},
		{name: "hole at the snapshot's index", stale: []uint64{2, 3, 5}, snapIndex: 4, snapTerm: 2},
		{name: "log ends before the snapshot", stale: []uint64{2, 3}, snapIndex: 5, snapTerm: 3},
		{name: "matching entry at the snapshot's index", stale: []uint64{2, 3, 4, 5}, snapIndex: 5, snapTerm: 2, wantKept: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := inmemConfig(t)
			conf.LocalID = "follower"
			// Long timeouts: the follower must stay a follower of the fake
			// leader for the whole test.
			conf.HeartbeatTimeout = 10 * time.Second
			conf.ElectionTimeout = 10 * time.Second
			conf.LeaderLeaseTimeout = 10 * time.Second
			store := NewInmemStore()
			_, snaps := FileSnapTest(t)
			addr, trans := NewInmemTransport("follower")
			leaderAddr, leaderTrans := NewInmemTransport("leader")
			trans.Connect(leaderAddr, leaderTrans)
			leaderTrans.Connect(addr, trans)
			configuration := Configuration{Servers: []Server{
				{Suffrage: Voter, ID: "follower", Address: addr},
				{Suffrage: Voter, ID: "leader", Address: leaderAddr},
			}}
			if err := BootstrapCluster(conf, store, store, snaps, trans, configuration); err != nil {
				t.Fatal(err)
			}
			if err := store.SetUint64(keyCurrentTerm, 2); err != nil {
				t.Fatal(err)
			}
			fsm := &MockFSM{}
			r, err := NewRaft(conf, fsm, store, store, snaps, trans)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Shutdown().Error() }()
			// The stale entries are appended as raft's own AppendEntries
			// would (NewRaft refuses a log with a hole, which a leader's
			// user restore leaves behind it at run time).
			var logs []*Log
			for _, i := range tc.stale {
				logs = append(logs, &Log{Index: i, Term: 2, Type: LogCommand, Data: []byte("stale")})
			}
			if err := store.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			r.setLastLog(tc.stale[len(tc.stale)-1], 2)

			var data bytes.Buffer
			if err := codec.NewEncoder(&data, &codec.MsgpackHandle{}).Encode([][]byte{[]byte("snapshot")}); err != nil {
				t.Fatal(err)
			}
			header := RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(leaderAddr)}
			install := &InstallSnapshotRequest{
				RPCHeader:          header,
				SnapshotVersion:    SnapshotVersionMax,
				Term:               3,
				LastLogIndex:       tc.snapIndex,
				LastLogTerm:        tc.snapTerm,
				Configuration:      EncodeConfiguration(configuration),
				ConfigurationIndex: 1,
				Size:               int64(data.Len()),
			}
			var installed InstallSnapshotResponse
			if err := leaderTrans.InstallSnapshot("follower", addr, install, &installed, &data); err != nil {
				t.Fatal(err)
			}
			if !installed.Success {
				t.Fatalf("InstallSnapshot refused: %+v", installed)
			}

			appendReq := &AppendEntriesRequest{
				RPCHeader:         header,
				Term:              3,
				PrevLogEntry:      tc.snapIndex,
				PrevLogTerm:       tc.snapTerm,
				Entries:           []*Log{{Index: tc.snapIndex + 1, Term: 3, Type: LogNoop}},
				LeaderCommitIndex: tc.snapIndex + 1,
			}
			var appended AppendEntriesResponse
			if err := leaderTrans.AppendEntries("follower", addr, appendReq, &appended); err != nil {
				t.Fatal(err)
			}
			if !appended.Success {
				t.Fatalf("AppendEntries after the snapshot refused: %+v", appended)
			}
			var got Log
			if err := store.GetLog(tc.snapIndex+1, &got); err != nil || got.Term != 3 {
				t.Fatalf("entry %d after the append = %+v, %v; want term 3", tc.snapIndex+1, got, err)
			}
			kept := store.GetLog(2, &got) == nil
			if kept != tc.wantKept {
				t.Fatalf("entry 2 kept = %v, want %v", kept, tc.wantKept)
			}
		})
	}
}
