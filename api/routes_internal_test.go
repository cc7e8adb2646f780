package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// maxWriteLeaderWait is the longest a write may wait for a leader: with no
// leader a write answers 503 no-leader within 1 s through any node (ARCHITECTURE.md,
// The HTTP contract), and a quarter of that second is left for the request
// to reach the node, fail its last try and be answered on a loaded machine.
const maxWriteLeaderWait = 750 * time.Millisecond

// TestRouteTable_WriteLeaderWait pins the no-leader contract in the route
// table: every write route waits for a leader at most maxWriteLeaderWait,
// less than its budget (a forward still fits after the wait), and budgetOf —
// what the retry-and-forward loop waits by — counts exactly that wait from
// the request's start. The end-to-end test measures the answer on real
// processes (cmd/elanous-node TestE2E_WriteWithoutLeader); this one needs no
// clock, so a longer wait fails it every time.
func TestRouteTable_WriteLeaderWait(t *testing.T) {
	writes := 0
	for _, rt := range new(Server).routeTable(true) {
		if !rt.write {
			continue
		}
		writes++
		name := rt.method + " " + rt.path
		wait := rt.leaderWait()
		if wait <= 0 || wait > maxWriteLeaderWait {
			t.Errorf("%s: leader wait %v, want in (0, %v] (503 no-leader within 1 s)", name, wait, maxWriteLeaderWait)
		}
		if wait >= rt.budget {
			t.Errorf("%s: leader wait %v, want below the route's budget %v", name, wait, rt.budget)
		}

		// The request's clock: budgetOf starts it on its first call and
		// keeps it, so the leader wait and the budget run from one instant.
		c := echo.New().NewContext(httptest.NewRequest(rt.method, rt.path, nil), httptest.NewRecorder())
		var deadline, leaderUntil, again time.Time
		h := withRoute(&rt)(func(c echo.Context) error {
			deadline, leaderUntil = budgetOf(c)
			_, again = budgetOf(c)
			return nil
		})
		if err := h(c); err != nil {
			t.Fatalf("%s: handler error = %v", name, err)
		}
		started := c.Get(routeKey).(*requestRoute).started
		if got := leaderUntil.Sub(started); got != wait || got > maxWriteLeaderWait {
			t.Errorf("%s: budgetOf waits %v for a leader, want the route's %v (at most %v)", name, got, wait, maxWriteLeaderWait)
		}
		if got := deadline.Sub(started); got != rt.budget {
			t.Errorf("%s: budgetOf gives a budget of %v, want the route's %v", name, got, rt.budget)
		}
		if !again.Equal(leaderUntil) {
			t.Errorf("%s: a second budgetOf moved the end of the leader wait by %v", name, again.Sub(leaderUntil))
		}
	}
	if writes == 0 {
		t.Fatal("the route table has no write route")
	}
}
