package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// runFailover kills the leader of s kills times under a one-client write loop
// through a surviving member, and measures the gap from each SIGKILL to the
// completion of the first write sent after it that succeeded. Between kills
// the killed member is restarted and the cluster waits until it is healthy.
func runFailover(ctx context.Context, s system, kills int, pr *printer) (*stats, error) {
	st := &stats{}
	for k := 1; k <= kills; k++ {
		if err := s.WaitHealthy(ctx); err != nil {
			return nil, fmt.Errorf("before kill %d: %w", k, err)
		}
		leader, err := s.Leader(ctx)
		if err != nil {
			return nil, err
		}
		through := (leader + 1) % 3
		write, cleanup, err := s.Writer(ctx, through)
		if err != nil {
			return nil, err
		}
		gap, err := killUnderLoad(ctx, s, leader, write, st)
		cleanup()
		if err != nil {
			return nil, fmt.Errorf("kill %d: %w", k, err)
		}
		pr.logf("%s: failover: kill %d/%d: member %d (leader) killed; first write through member %d after %.0f ms",
			s.Name(), k, kills, leader, through, ms(gap))
		st.GapsMs = append(st.GapsMs, ms(gap))
		if err := s.Restart(ctx, leader); err != nil {
			return nil, err
		}
	}
	if err := s.WaitHealthy(ctx); err != nil {
		return nil, fmt.Errorf("after the last kill: %w", err)
	}
	sorted := slices.Clone(st.GapsMs)
	slices.Sort(sorted)
	st.Ops = len(sorted)
	st.GapMaxMs = sorted[len(sorted)-1]
	if n := len(sorted); n%2 == 1 {
		st.GapMedianMs = sorted[n/2]
	} else {
		st.GapMedianMs = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	pr.logf("%s: failover: median %.0f ms, max %.0f ms over %d kills", s.Name(), st.GapMedianMs, st.GapMaxMs, st.Ops)
	return st, nil
}

// probeState is what the write loop has seen; guarded by mu.
type probeState struct {
	mu          sync.Mutex
	streak      int       // consecutive successful writes
	deadAt      time.Time // when the killed process had exited; zero before
	recoveredAt time.Time // completion of the first success sent after deadAt
}

// killUnderLoad runs write in a loop, waits for 20 consecutive successes,
// kills member victim and returns the gap from the SIGKILL to the completion
// of the first write that was sent after the victim exited and succeeded. Errors of the loop are counted in st.
func killUnderLoad(ctx context.Context, s system, victim int, write step, st *stats) (time.Duration, error) {
	var ps probeState
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for loopCtx.Err() == nil {
			t0 := time.Now()
			err := write(loopCtx)
			t1 := time.Now()
			ps.mu.Lock()
			if err == nil {
				ps.streak++
				if !ps.deadAt.IsZero() && ps.recoveredAt.IsZero() && t0.After(ps.deadAt) {
					ps.recoveredAt = t1
				}
			} else {
				ps.streak = 0
				if loopCtx.Err() == nil {
					st.addError(err)
				}
			}
			ps.mu.Unlock()
			if err != nil {
				select {
				case <-loopCtx.Done():
				case <-time.After(failoverRetryPause):
				}
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()

	err := testcluster.WaitFor(ctx, "the kill to stop every write", 20*time.Second, pollEvery, func(context.Context) error {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if ps.streak < 20 {
			return fmt.Errorf("the write loop has %d consecutive successes, want 20", ps.streak)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// The gap runs from the signal; only a write sent once the victim is
	// gone counts as recovery, so none answered by the old leader does.
	killAt := time.Now()
	if err := s.Kill(victim); err != nil {
		return 0, err
	}
	ps.mu.Lock()
	ps.deadAt = time.Now()
	ps.mu.Unlock()
	err = testcluster.WaitFor(ctx, "a write after the kill", 30*time.Second, pollEvery, func(context.Context) error {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if ps.recoveredAt.IsZero() {
			return errors.New("no write has succeeded since the kill")
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.recoveredAt.Sub(killAt), nil
}
