package testutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
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

// PollEvery is Poll at the interval every, for a wait whose latency the test
// reports (a failover), where 20 ms would blur the figure.
func PollEvery(t testing.TB, what string, d, every time.Duration, f func() error) {
	t.Helper()
	poll(t, what, d, every, f)
}

// Hold calls f every interval for d and fails the test at f's first error,
// naming what: an invariant sampled over a window rather than a state awaited.
func Hold(t testing.TB, what string, d, every time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := f(); err != nil {
			t.Fatalf("%s stopped holding: %v", what, err)
		}
		if time.Now().After(end) {
			return
		}
		<-tick.C
	}
}

// Within calls cond every 5 ms until it holds or d passes, and reports
// whether it held: a wait whose timeout is an outcome the test handles
// (trying again, say), not a failure.
func Within(d time.Duration, cond func() bool) bool {
	return testcluster.WaitFor(context.Background(), "", d, 5*time.Millisecond, func(context.Context) error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

// Pause waits d, or less if stop is closed first, and reports whether stop is
// still open. It paces a background load loop, which must end promptly when
// the test halts it.
func Pause(stop <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

// poll is testcluster.WaitFor, the project's one polling loop, failing the
// test when it times out.
func poll(t testing.TB, what string, d, every time.Duration, f func() error) {
	t.Helper()
	if err := testcluster.WaitFor(context.Background(), what, d, every, func(context.Context) error { return f() }); err != nil {
		t.Fatalf("waiting for %v", err) // "what: not within d: the last error"
	}
}
