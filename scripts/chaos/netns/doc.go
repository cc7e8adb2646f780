// Package netns builds the chaos suite's network: one namespace per node
// ("eln-n1", "eln-n2", …, addresses 10.77.0.11, .12, …) joined by veth pairs
// to a bridge that lives in a hub namespace ("eln-hub"), plus a veth from the
// harness's own namespace (10.77.0.1) so the workload reaches every node. The
// bridge sits in its own namespace so that the host's firewall (Docker sets
// FORWARD to DROP, and br_netfilter sends bridged frames through it) never
// sees the cluster's traffic.
//
// Faults are applied inside the node namespaces: iptables rules for cut
// links (one-way or both ways) and random loss, and an NFQUEUE delayer run by
// the harness for latency with jitter (the test machines' kernels have no
// netem). Everything is named with the "eln-" prefix, created by Setup and
// removed by Close; Setup also removes what a crashed run left behind.
package netns
