package transport

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/hashicorp/raft"
)

// TestTCPStream_DropsAndClose: an accepted connection reports its first
// failed Read or Write once, and Close closes every connection, accepted or dialed,
// and refuses later dials, as a dead process would.
func TestTCPStream_DropsAndClose(t *testing.T) {
	addrs := testutil.FreeAddrs(t, 1)
	adv, err := net.ResolveTCPAddr("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	var drops atomic.Int32
	s, err := NewTCPStream(addrs[0], adv, func() { drops.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	accept := func() net.Conn {
		t.Helper()
		got, err := s.Accept()
		if err != nil {
			t.Fatalf("Accept() error = %v", err)
		}
		return got
	}

	peer, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	in := accept()
	peer.Close()
	buf := make([]byte, 8)
	for range 2 {
		if _, err := in.Read(buf); err == nil {
			t.Fatal("Read() on a connection its peer closed succeeded")
		}
	}
	if got := drops.Load(); got != 1 {
		t.Errorf("a peer's close reported %d drops, want 1", got)
	}
	in.Close()

	// A peer that dies while its request is served shows only in the
	// answer's Write: raft reads no more after a failed flush.
	peer, err = net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	in = accept()
	peer.Close()
	var werr error
	for range 100 { // the first writes may land in the socket buffer before the reset comes back
		if _, werr = in.Write([]byte("answer")); werr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if werr == nil {
		t.Fatal("Write() to a closed peer kept succeeding")
	}
	if got := drops.Load(); got != 2 {
		t.Errorf("a failed Write reported %d drops in all, want 2", got)
	}
	in.Close()

	// One connection of each kind open, then Close.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	out, err := s.Dial(raft.ServerAddress(other.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("Dial() error = %v", err)
	}
	defer out.Close()
	outPeer, err := other.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer outPeer.Close()
	inPeer, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer inPeer.Close()
	accept()
	s.Close()
	for name, c := range map[string]net.Conn{"the dialed connection's peer": outPeer, "the accepted connection's peer": inPeer} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err == nil || IsTimeout(err) {
			t.Errorf("%s read %v after Close, want EOF or a reset", name, err)
		}
	}
	if _, err := s.Dial(raft.ServerAddress(other.Addr().String()), time.Second); err == nil {
		t.Error("Dial() after Close succeeded")
	}
	if _, err := net.DialTimeout("tcp", addrs[0], time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a dial to the closed stream's address = %v, want refused", err)
	}
}
