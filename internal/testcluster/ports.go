package testcluster

import (
	"fmt"
	"net"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago, chosen by the kernel from its ephemeral range; ports of
// `elanous-node dev` (31412–31433) and of the fault suite (31513–31533) are
// never returned. Another process may take one before the caller binds it:
// callers accept that small race.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 31400 && port <= 31599 {
			continue
		}
		ports = append(ports, port)
	}
	return ports, nil
}
