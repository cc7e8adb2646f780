//go:build chaos

package cluster

import (
	"os"
	"strings"
	"sync"
	"time"
)

// ChaosClockOffsetEnv names the file holding the wall-clock offset of a chaos
// build: a Go duration such as "5m" or "-5m". A missing or unreadable file
// means no offset.
const ChaosClockOffsetEnv = "ELANOUS_CHAOS_CLOCK_OFFSET_FILE"

// chaosClockReread bounds how often the offset file is read.
const chaosClockReread = 100 * time.Millisecond

var chaosClock struct {
	mu     sync.Mutex
	offset time.Duration // guarded by mu
	readAt time.Time     // guarded by mu; zero before the first read
}

// systemWallClock is the wall clock a new leader reads once when it wins an
// election. In a chaos build it is time.Now() plus the offset written in the
// file named by ELANOUS_CHAOS_CLOCK_OFFSET_FILE (re-read at most every 100 ms),
// so the fault suite can skew a node's clock without touching the machine's.
// Only the wall reading moves: the monotonic part of the result is dropped, as
// for any adjusted time.
func systemWallClock() time.Time {
	now := time.Now()
	return now.Round(0).Add(chaosClockOffset(now))
}

func chaosClockOffset(now time.Time) time.Duration {
	chaosClock.mu.Lock()
	defer chaosClock.mu.Unlock()
	if !chaosClock.readAt.IsZero() && now.Sub(chaosClock.readAt) < chaosClockReread {
		return chaosClock.offset
	}
	chaosClock.readAt = now
	chaosClock.offset = 0
	path := os.Getenv(ChaosClockOffsetEnv)
	if path == "" {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
		chaosClock.offset = d
	}
	return chaosClock.offset
}
