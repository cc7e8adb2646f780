package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The kernel ABI of nfnetlink_queue (linux/netfilter/nfnetlink_queue.h).
const (
	netlinkNetfilter = 12
	nfnlSubsysQueue  = 3
	nfqnlMsgPacket   = 0
	nfqnlMsgVerdict  = 1
	nfqnlMsgConfig   = 2
	nfqaCfgCmd       = 1
	nfqaCfgParams    = 2
	nfqaCfgQueueLen  = 3
	nfqaCfgMask      = 4
	nfqaCfgFlags     = 5
	nfqaPacketHdr    = 1
	nfqaVerdictHdr   = 2
	cmdBind          = 1
	cmdUnbind        = 2
	copyMeta         = 1
	cfgFailOpen      = 1
	nfAccept         = 1
)

// delayer holds the packets of one NFQUEUE queue for a random delay before
// accepting them. Its socket lives in the node's namespace.
type delayer struct {
	fd     int
	queue  uint16
	base   time.Duration
	jitter time.Duration
	done   chan struct{} // closed by stop
	exited chan struct{} // closed when loop returns
	once   sync.Once
	wmu    sync.Mutex // serialises writes and guards closing fd
	closed bool       // guarded by wmu
}

// startDelayer opens a netfilter netlink socket inside namespace ns, binds it
// to queue q and starts answering its packets after base ± jitter.
func startDelayer(ns string, q uint16, base, jitter time.Duration) (*delayer, error) {
	fd, err := socketIn(ns)
	if err != nil {
		return nil, err
	}
	d := &delayer{fd: fd, queue: q, base: base, jitter: jitter, done: make(chan struct{}), exited: make(chan struct{})}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	tv := syscall.NsecToTimeval(int64(200 * time.Millisecond))
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind netlink: %w", err)
	}
	cmd := []byte{cmdBind, 0, 0, syscall.AF_INET}
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0xffff)
	params[4] = copyMeta
	qlen := binary.BigEndian.AppendUint32(nil, 8192)
	flags := binary.BigEndian.AppendUint32(nil, cfgFailOpen)
	for _, attrs := range [][]attr{
		{{nfqaCfgCmd, cmd}},
		{{nfqaCfgParams, params}, {nfqaCfgQueueLen, qlen}, {nfqaCfgFlags, flags}, {nfqaCfgMask, flags}},
	} {
		if err := d.send(nfqnlMsgConfig, true, attrs); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		if err := d.ack(); err != nil {
			syscall.Close(fd)
			return nil, fmt.Errorf("configure queue %d: %w", q, err)
		}
	}
	go d.loop()
	return d, nil
}

// socketIn creates the netlink socket with the calling thread switched into
// namespace ns; the socket stays in that namespace.
func socketIn(ns string) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return -1, err
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return -1, err
	}
	defer target.Close()
	if err := setns(int(target.Fd())); err != nil {
		return -1, fmt.Errorf("enter %s: %w", ns, err)
	}
	fd, serr := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkNetfilter)
	if err := setns(int(self.Fd())); err != nil {
		// The thread is stuck in the wrong namespace: never let it run anything else.
		panic(fmt.Sprintf("netns: cannot return from %s: %v", ns, err))
	}
	if serr != nil {
		return -1, fmt.Errorf("netlink socket: %w", serr)
	}
	return fd, nil
}

func setns(fd int) error {
	_, _, errno := syscall.RawSyscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

type attr struct {
	typ  uint16
	data []byte
}

func (d *delayer) send(msg uint16, ack bool, attrs []attr) error {
	b := make([]byte, 20, 64)
	for _, a := range attrs {
		l := 4 + len(a.data)
		b = binary.LittleEndian.AppendUint16(b, uint16(l))
		b = binary.LittleEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	flags := uint16(syscall.NLM_F_REQUEST)
	if ack {
		flags |= syscall.NLM_F_ACK
	}
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	binary.LittleEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|msg)
	binary.LittleEndian.PutUint16(b[6:], flags)
	b[16] = syscall.AF_UNSPEC
	b[17] = 0 // NFNETLINK_V0
	binary.BigEndian.PutUint16(b[18:], d.queue)
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed {
		return syscall.EBADF
	}
	return syscall.Sendto(d.fd, b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
}

// ack reads the answer to a request sent with NLM_F_ACK.
func (d *delayer) ack() error {
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(d.fd, buf, 0)
	if err != nil {
		return err
	}
	if n < 20 || binary.LittleEndian.Uint16(buf[4:]) != syscall.NLMSG_ERROR {
		return errors.New("unexpected netlink answer")
	}
	if code := int32(binary.LittleEndian.Uint32(buf[16:])); code != 0 {
		return syscall.Errno(-code)
	}
	return nil
}

func (d *delayer) loop() {
	defer close(d.exited)
	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(d.fd, buf, 0)
		select {
		case <-d.done:
			return
		default:
		}
		if err != nil {
			if err == syscall.EINTR || err == syscall.ENOBUFS || err == syscall.EAGAIN {
				continue
			}
			return
		}
		for off := 0; off+16 <= n; {
			l := int(binary.LittleEndian.Uint32(buf[off:]))
			if l < 16 || off+l > n {
				break
			}
			typ := binary.LittleEndian.Uint16(buf[off+4:])
			if typ == nfnlSubsysQueue<<8|nfqnlMsgPacket {
				if id, ok := packetID(buf[off+20 : off+l]); ok {
					delay := d.base
					if d.jitter > 0 {
						delay += time.Duration(rand.Int64N(int64(2*d.jitter+1))) - d.jitter
					}
					time.AfterFunc(delay, func() { d.verdict(id) })
				}
			}
			off += (l + 3) &^ 3
		}
	}
}

func packetID(attrs []byte) (uint32, bool) {
	for off := 0; off+4 <= len(attrs); {
		l := int(binary.LittleEndian.Uint16(attrs[off:]))
		typ := binary.LittleEndian.Uint16(attrs[off+2:]) & 0x7fff
		if l < 4 || off+l > len(attrs) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[off+4:]), true
		}
		off += (l + 3) &^ 3
	}
	return 0, false
}

func (d *delayer) verdict(id uint32) {
	select {
	case <-d.done:
		return
	default:
	}
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	_ = d.send(nfqnlMsgVerdict, false, []attr{{nfqaVerdictHdr, v}})
}

// stop unbinds the queue and closes the socket; packets still held are
// released by the kernel (the rule has --queue-bypass and is flushed first).
func (d *delayer) stop() {
	d.once.Do(func() {
		_ = d.send(nfqnlMsgConfig, false, []attr{{nfqaCfgCmd, []byte{cmdUnbind, 0, 0, syscall.AF_INET}}})
		close(d.done)
		<-d.exited
		d.wmu.Lock()
		d.closed = true
		syscall.Close(d.fd)
		d.wmu.Unlock()
	})
}

// sysSetns is setns(2)'s number (the syscall package does not name it).
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268, "386": 346, "arm": 375}[runtime.GOARCH]
