package apitest

import (
	"net"
	"path/filepath"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// StartWaiting starts one more node named machine, on ephemeral ports, with
// no Raft state and bootstrap off, as a replacement server is started: it
// waits to be added. Its configured candidates are the cluster's and itself;
// the running nodes' configurations do not change. It returns the node's
// index and the request that adds it (POST /v1/cluster/peers).
func (c *Cluster) StartWaiting(machine string) (int, wire.AddPeerRequest) {
	c.t.Helper()
	var trans raft.Transport
	var raftAddr string
	scheme := "http://"
	if c.PKI != nil {
		raftAddr, scheme = testutil.FreeAddrs(c.t, 1)[0], "https://" // cluster.New opens the TLS transport
	} else {
		tcp, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 2*time.Second, nil)
		if err != nil {
			c.t.Fatalf("raft transport: %v", err)
		}
		trans, raftAddr = tcp, string(tcp.LocalAddr())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatalf("listen: %v", err)
	}
	cand := cluster.Candidate{Machine: machine, URL: scheme + ln.Addr().String(), Raft: raftAddr}
	c.cands = append(c.cands, cand)
	c.trans = append(c.trans, trans)
	c.Nodes = append(c.Nodes, &Node{Machine: machine, URL: cand.URL, joined: true,
		DataDir: filepath.Join(filepath.Dir(c.Nodes[0].DataDir), machine)})
	i := len(c.Nodes) - 1
	c.startNode(i, trans, ln)
	return i, wire.AddPeerRequest{Machine: machine, URL: cand.URL, Raft: cand.Raft}
}

// Suffrage returns machine's suffrage in node i's latest Raft configuration
// ("voter", "nonvoter"), or "" when it is not a server there.
func (c *Cluster) Suffrage(i int, machine string) string {
	for _, p := range c.Nodes[i].Node.Peers() {
		if p.Machine == machine && p.Suffrage != cluster.SuffrageNone {
			return p.Suffrage
		}
	}
	return ""
}

// waitSettled waits until every node is at the newest format level and its
// candidate directory lists every node.
func (c *Cluster) waitSettled() {
	c.t.Helper()
	for _, n := range c.Nodes {
		c.WaitFor(n.Machine+" at the newest format with the directory seeded", 10*time.Second, func() bool {
			return n.Node.FSM().Format() == fsm.MaxFormat && len(n.Node.FSM().Candidates()) == len(c.Nodes)
		})
	}
}
