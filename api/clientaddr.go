package api

// Client addresses: a request's remote address, the one a candidate
// reports for a forward, and the set of candidate IPs that tells the two
// apart (ARCHITECTURE.md §7).

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/wire"
)

// peerForward reports whether r is a forward from another candidate: it
// carries the forwarding header and comes from a candidate's address. A
// client that sets the header itself is still a client.
func (g *guard) peerForward(r *http.Request) bool {
	if r.Header.Get(wire.HeaderForwarded) == "" {
		return false
	}
	ip, ok := remoteIP(r.RemoteAddr)
	return ok && g.peers.contains(ip)
}

// clientAddress is the address of the client that sent r: the peer's, or
// for a forward from another candidate the client address it reports.
func (g *guard) clientAddress(r *http.Request) string {
	if fwd := r.Header.Get(wire.HeaderForwardedFor); fwd != "" && len(fwd) <= 64 && g.peerForward(r) {
		if _, err := netip.ParseAddrPort(fwd); err == nil {
			return fwd
		}
	}
	return r.RemoteAddr
}

// remoteIP parses the IP of a host:port remote address.
func remoteIP(remote string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// addressKey is the rate-limit and cap key of a remote address: its IPv4
// address, or its IPv6 /64 (one host commonly holds a whole /64).
func addressKey(remote string) string {
	ip, ok := remoteIP(remote)
	if !ok {
		if host, _, err := net.SplitHostPort(remote); err == nil {
			return host
		}
		return remote
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// peerRefresh is how often the peer set resolves the candidates' host names again.
const peerRefresh = 30 * time.Second

// peerSet is the set of the candidates' IP addresses: the hosts of their
// API URLs and Raft addresses as cluster.Node.Candidates lists them
// (ARCHITECTURE.md §9).
// Names are resolved in the background, at most every peerRefresh; IP
// literals count at once.
type peerSet struct {
	node *cluster.Node

	mu         sync.Mutex
	ips        map[netip.Addr]bool // guarded by mu
	at         time.Time           // guarded by mu: the last refresh
	refreshing bool                // guarded by mu
}

func newPeerSet(node *cluster.Node) *peerSet {
	p := &peerSet{node: node}
	p.ips, _ = p.literals()
	return p
}

// contains reports whether ip is a candidate's, starting a refresh when the
// set is stale.
func (p *peerSet) contains(ip netip.Addr) bool {
	p.mu.Lock()
	ok := p.ips[ip]
	stale := !p.refreshing && time.Since(p.at) > peerRefresh
	if stale {
		p.refreshing = true
	}
	p.mu.Unlock()
	if stale {
		go p.refresh()
	}
	return ok
}

// hosts lists the candidates' hosts.
func (p *peerSet) hosts() []string {
	if p.node == nil {
		return nil
	}
	var out []string
	add := func(rawURL, raftAddr string) {
		if u, err := url.Parse(rawURL); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
		if h, _, err := net.SplitHostPort(raftAddr); err == nil && h != "" {
			out = append(out, h)
		}
	}
	for _, c := range p.node.Candidates() {
		add(c.URL, c.Raft)
	}
	return out
}

// literals returns the IP literals among the hosts, and the names.
func (p *peerSet) literals() (map[netip.Addr]bool, []string) {
	ips := map[netip.Addr]bool{}
	var names []string
	for _, h := range p.hosts() {
		if ip, err := netip.ParseAddr(h); err == nil {
			ips[ip.Unmap()] = true
		} else {
			names = append(names, h)
		}
	}
	return ips, names
}

func (p *peerSet) refresh() {
	ips, names := p.literals()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ips[a.Unmap()] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ips, p.at, p.refreshing = ips, time.Now(), false
}
