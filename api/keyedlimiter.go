package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxRateKeys bounds each rate limiter's table of buckets; see keyedLimiter.
const maxRateKeys = 1 << 16

// keyedLimiter is one token bucket (golang.org/x/time/rate) per key. Its
// table is bounded: once it holds maxRateKeys buckets, full ones (which
// behave exactly as new ones) are dropped, and if none is full the table is
// emptied, forgetting debts rather than growing without bound.
type keyedLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter // guarded by mu
}

func newKeyedLimiter(limit rate.Limit, burst int) *keyedLimiter {
	return &keyedLimiter{limit: limit, burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from key's bucket at now. When none is left it
// reports false and how long until one is.
func (k *keyedLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		if len(k.buckets) >= maxRateKeys {
			k.pruneLocked(now)
		}
		b = rate.NewLimiter(k.limit, k.burst)
		k.buckets[key] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing / float64(k.limit) * float64(time.Second))
}

func (k *keyedLimiter) pruneLocked(now time.Time) {
	for key, b := range k.buckets {
		if b.TokensAt(now) >= float64(k.burst) {
			delete(k.buckets, key)
		}
	}
	if len(k.buckets) >= maxRateKeys {
		clear(k.buckets)
	}
}
