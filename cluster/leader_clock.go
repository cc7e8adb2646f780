//go:build !chaos

package cluster

import "time"

// systemWallClock is the wall clock a new leader reads once when it wins an
// election. The chaos build replaces it with one that can be skewed.
func systemWallClock() time.Time { return time.Now() }
