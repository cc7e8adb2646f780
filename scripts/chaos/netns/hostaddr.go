package netns

import "fmt"

// ClientIP is the i-th extra address of the harness's link (10.77.0.2,
// 10.77.0.3, …), for clients the nodes must tell apart from the workload's
// (the abuse scenario's abusers). AddHostAddress puts it on the link.
func ClientIP(i int) string { return fmt.Sprintf("10.77.0.%d", 2+i) }

// AddHostAddress adds ip to the harness's link, so that a client can dial
// the nodes from it (net.Dialer.LocalAddr). It goes with the link when the
// network is closed.
func (n *Net) AddHostAddress(ip string) error {
	return run("ip", "addr", "add", ip+"/24", "dev", HostLink)
}
