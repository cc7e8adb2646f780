package cluster

import (
	"context"
	"fmt"
)

// TransferLeadership hands leadership to another voter when this node leads,
// so the cluster need not wait out an election timeout. Bounded by ctx.
func (n *Node) TransferLeadership(ctx context.Context) {
	if !n.IsLeader() {
		return
	}
	done := make(chan error, 1)
	go func() { done <- n.raft.LeadershipTransfer().Error() }()
	select {
	case err := <-done:
		if err != nil {
			n.log.Warn("leadership transfer failed", "err", err)
		} else {
			n.log.Info("handed leadership over")
		}
	case <-ctx.Done():
		n.log.Warn("leadership transfer timed out")
	}
}

// Close stops the node. A leader first hands leadership to another voter
// (bounded by ctx) so the cluster does not wait out an election timeout.
func (n *Node) Close(ctx context.Context) error {
	n.TransferLeadership(ctx)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	close(n.stop)
	err := n.raft.Shutdown().Error()
	n.wg.Wait()
	n.closeAll()
	if err != nil {
		return fmt.Errorf("shutdown raft: %w", err)
	}
	return nil
}
