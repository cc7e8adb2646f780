package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS returns node i's resident set size in bytes, read from
// /proc/<pid>/status (VmRSS). The node runs under `ip netns exec`, which
// execs it in place, so the started process's pid is the node's.
func (c *Cluster) RSS(i int) (int64, error) {
	n := c.Nodes[i]
	p := c.proc(i)
	if p == nil || p.Exited() {
		return 0, fmt.Errorf("%s is not running", n.Name)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS of %s: %q", n.Name, rest)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for %s", n.Name)
}
