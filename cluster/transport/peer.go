// Package transport is the Raft network layer of a cluster node: the
// plaintext stream layer (TCPStream), the mutual-TLS transport (TLS), the
// wrapper that keeps heartbeats on raft's main loop (Safe), the drop reports
// and refusal check fast failover starts from (OnDrop, ProcessGone), and the
// hclog adapter raft writes its lines through (RaftLogger). It knows nothing
// of the node: package cluster builds on it. See ARCHITECTURE.md §1
// ("Packages and their rooms"), §3 ("Fast failover") and §5 ("Security on
// the wire").
package transport

import (
	"errors"
	"syscall"
)

// Peer is one machine allowed to speak Raft with this node: its machine name,
// which its certificate must name, and its Raft address.
type Peer struct {
	Machine string
	Raft    string
}

// ProcessGone reports whether a dial's error says that nothing listens at the
// address: the host is up and answered, and no process holds the port. A
// timeout, an unreachable host or network, or a connection that succeeds
// says nothing about the process.
func ProcessGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
