package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// e2eNoLeaderBound is how long a write may take to answer 503 no-leader on a
// node that has no quorum. The contract is "within 1 s" (a member's lease
// client gives up after 1 s); the bound adds 2 s for a loaded machine and a
// -race build, so only a node that waits for the quorum far beyond the
// contract fails it.
const e2eNoLeaderBound = 3 * time.Second

// TestE2E_WriteWithoutLeader kills two of three `serve` processes; every kind
// of write sent to the survivor answers 503 no-leader, with an error body and
// Retry-After, within e2eNoLeaderBound.
func TestE2E_WriteWithoutLeader(t *testing.T) {
	// The survivor is the leader: a follower left alone could be handed
	// leadership for a moment; a leader that loses its quorum steps down once
	// and can never lead again.
	c, survivor, _ := startE2ECluster(t)
	acked := newAckedWrites()
	c.register(acked, survivor, "machine:lonely")
	lease := c.acquire(acked, survivor, "no-leader")
	c.issueMachineToken(survivor, "lonely")
	for _, nd := range c.running(survivor) {
		nd.proc.kill(t)
	}
	testutil.Poll(t, survivor.id+" to step down and know no leader", 10*time.Second, func() error {
		st, err := c.getStatus(survivor)
		if err != nil {
			return err
		}
		if st.State == "Leader" || st.Leader != "" {
			return fmt.Errorf("state %s, leader %q", st.State, st.Leader)
		}
		return nil
	})

	// The client waits far longer than the bound, so a slow answer shows
	// as a time, not as a transport error.
	client := testutil.NewClient(30*time.Second, false)
	u, memberToken, admin := survivor.url, c.tokens.Member, c.tokens.Admin
	id := "/v1/resources/" + member.EscapeID("machine:lonely")
	portPath := fmt.Sprintf("%s/v1/leases/port/%d", u, lease.Port)
	writes := []struct {
		name string
		call testutil.Call
	}{
		{"register", e2eCall(http.MethodPost, u+"/v1/resources/register", memberToken, registerBody("machine:lonely", "lonely"))},
		{"resource heartbeat", e2eCall(http.MethodPost, u+id+"/heartbeat", memberToken, map[string]any{})},
		{"delete resource", e2eCall(http.MethodDelete, u+id, memberToken, nil)},
		{"acquire", e2eCall(http.MethodPost, u+"/v1/leases/port", memberToken, acquireBody("lonely", "no-leader-2"))},
		{"lease heartbeat", e2eCall(http.MethodPost, portPath+"/heartbeat", memberToken, nil).WithHeader(wire.HeaderPortLeaseID, lease.LeaseID)},
		{"release", e2eCall(http.MethodDelete, portPath, memberToken, nil).WithHeader(wire.HeaderPortLeaseID, lease.LeaseID)},
		{"issue token", e2eCall(http.MethodPost, u+"/v1/tokens/member", admin, wire.IssueTokenRequest{Machine: "lonely-2"})},
		{"revoke token", e2eCall(http.MethodDelete, u+"/v1/tokens/member/lonely", admin, nil)},
	}
	for _, w := range writes {
		w.call.Client = client
		r, err := testutil.Do(w.call)
		if err != nil {
			t.Errorf("%s without a leader: %v", w.name, err)
			continue
		}
		t.Logf("%s: %d after %v", w.name, r.Status, r.Elapsed.Round(time.Millisecond))
		if r.Status != http.StatusServiceUnavailable {
			t.Errorf("%s without a leader = %s, want 503 %s", w.name, r, wire.CodeNoLeader)
			continue
		}
		if err := testutil.CheckError(r, wire.CodeNoLeader); err != nil {
			t.Errorf("%s without a leader: %v", w.name, err)
		}
		if r.Elapsed > e2eNoLeaderBound {
			t.Errorf("%s without a leader answered after %v, want within %v (the contract is 1 s)", w.name, r.Elapsed.Round(time.Millisecond), e2eNoLeaderBound)
		}
	}
	c.checkLogs(survivor.proc)
}
