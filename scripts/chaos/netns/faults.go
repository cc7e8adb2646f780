package netns

import (
	"fmt"
	"time"
)

// Block drops every packet from host `from` to host `to` (one way): the rule
// sits in to's INPUT chain, so to still sends to from.
func (n *Net) Block(from, to int) error {
	if from == to {
		return nil
	}
	return n.inNS(to, "iptables", "-w", "-I", "INPUT", "-s", n.Hosts[from].IP, "-j", "DROP")
}

// Cut drops every packet between hosts a and b, both ways.
func (n *Net) Cut(a, b int) error {
	if err := n.Block(a, b); err != nil {
		return err
	}
	return n.Block(b, a)
}

// Partition cuts every link between hosts of different groups. Hosts in no
// group keep all their links. The harness's own link is never cut: clients
// still reach every node, as members on the far side of a partition would.
func (n *Net) Partition(groups ...[]int) error {
	for gi, g := range groups {
		for _, a := range g {
			for gj := gi + 1; gj < len(groups); gj++ {
				for _, b := range groups[gj] {
					if err := n.Cut(a, b); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Isolate cuts host i from every other host.
func (n *Net) Isolate(i int) error {
	var rest []int
	for j := range n.Hosts {
		if j != i {
			rest = append(rest, j)
		}
	}
	return n.Partition([]int{i}, rest)
}

// Loss drops a random fraction p of the packets host i receives from other
// nodes.
func (n *Net) Loss(i int, p float64) error {
	return n.inNS(i, "iptables", "-w", "-A", "INPUT", "-i", "eth0", "!", "-s", HostIP,
		"-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.3f", p), "-j", "DROP")
}

// Delay holds every packet host i sends to other nodes for base ± jitter
// (uniformly drawn per packet, so packets may be reordered, as with netem).
func (n *Net) Delay(i int, base, jitter time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.delays[i]; ok {
		return fmt.Errorf("host %d already delayed", i)
	}
	q := uint16(700 + i)
	d, err := startDelayer(n.Hosts[i].NS, q, base, jitter)
	if err != nil {
		return fmt.Errorf("delay %s: %w", n.Hosts[i].NS, err)
	}
	if err := n.inNS(i, "iptables", "-w", "-A", "OUTPUT", "-o", "eth0", "!", "-d", HostIP,
		"-j", "NFQUEUE", "--queue-num", fmt.Sprint(q), "--queue-bypass"); err != nil {
		d.stop()
		return err
	}
	n.delays[i] = d
	return nil
}

// Heal removes every fault from every host: cut links, loss and delay.
func (n *Net) Heal() error {
	var first error
	for i := range n.Hosts {
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			if err := n.inNS(i, "iptables", "-w", "-F", chain); err != nil && first == nil {
				first = err
			}
		}
	}
	n.mu.Lock()
	for i, d := range n.delays {
		d.stop()
		delete(n.delays, i)
	}
	n.mu.Unlock()
	return first
}
