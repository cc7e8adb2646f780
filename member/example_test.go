package member_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// A storage service guards each resource with the fences of one port's
// leases. Writes use the monotonic check; a dangerous action (dropping a
// table) is confirmed with the cluster first. In production the checker is
// the *member.Client the service already has.
func ExampleGuard() {
	var guard member.Guard

	// Holder A was granted port 31450 under fence 7 and writes.
	fmt.Println("A writes:", guard.Admit("orders", 7) == nil)
	// A pauses; its lease expires and the port is granted to B under fence 12.
	fmt.Println("B writes:", guard.Admit("orders", 12) == nil)
	// A wakes and writes as if it still held the port: refused locally.
	err := guard.Admit("orders", 7)
	fmt.Println("A writes again:", err)

	// The cluster's view, here a stand-in: port 31450's live lease carries fence 12.
	cluster := member.FenceCheckerFunc(func(_ context.Context, port int, fence uint64) (wire.FenceCheck, error) {
		if fence == 12 {
			return wire.FenceCheck{Valid: true, Port: port, Fence: fence, Machine: "b"}, nil
		}
		return wire.FenceCheck{}, &member.StaleFenceError{Port: port, Fence: fence, Current: 12, Reason: "port 31450 was granted again, under fence 12"}
	})
	check, err := guard.Confirm(context.Background(), cluster, "orders", 31450, 12)
	fmt.Println("B drops the table:", err == nil, "holder", check.Machine)
	_, err = guard.Confirm(context.Background(), cluster, "orders", 31450, 7)
	fmt.Println("A drops the table:", errors.Is(err, member.ErrStaleFence))
	// Output:
	// A writes: true
	// B writes: true
	// A writes again: fence 7 for orders is stale: fence 12 has already been admitted
	// B drops the table: true holder b
	// A drops the table: true
}
