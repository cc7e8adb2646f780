package testutil

import (
	"errors"
	"testing"
	"time"
)

// errNotYet is what WaitFor's condition reports while it does not hold.
var errNotYet = errors.New("condition not met")

// WaitFor polls cond every 5 ms until it holds, and fails the test after d
// naming what it waited for. Use it for conditions that are cheap to check in
// process (a node's state).
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	poll(t, what, d, 5*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Poll calls f every 20 ms until it returns nil, and fails the test after d
// with what and f's last error. Use it for conditions that cost a request
// (an HTTP answer from a real process).
func Poll(t testing.TB, what string, d time.Duration, f func() error) {
	t.Helper()
	poll(t, what, d, 20*time.Millisecond, f)
}

func poll(t testing.TB, what string, d, every time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if errors.Is(err, errNotYet) {
				t.Fatalf("timed out after %v waiting for %s", d, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		<-tick.C
	}
}
