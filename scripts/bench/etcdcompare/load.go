package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// step is one request of a client: a write or a renewal. It returns nil
// only when the request succeeded. A step is called by one goroutine at a
// time and carries its own deadline.
type step func(ctx context.Context) error

// stats are one system's figures on one row.
type stats struct {
	Ops       int     `json:"ops"`
	Errors    int     `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50Ms     float64 `json:"p50Ms,omitempty"`
	P99Ms     float64 `json:"p99Ms,omitempty"`
	MaxMs     float64 `json:"maxMs,omitempty"`
	// ErrorKinds counts errors by their text (trimmed), so a failure is
	// visible in the JSON.
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	// Failover row: the gap of every kill, its median and max.
	GapsMs      []float64 `json:"gapsMs,omitempty"`
	GapMedianMs float64   `json:"gapMedianMs,omitempty"`
	GapMaxMs    float64   `json:"gapMaxMs,omitempty"`
	// Open loops (runOpenLoop): the offered rate, the requests due within
	// the run, those sent and those dropped (not sent within the drain
	// after the run), and the service time (from sending) beside the
	// latency from the due time that P50Ms and P99Ms give.
	TargetPerSec float64 `json:"targetPerSec,omitempty"`
	Issued       int     `json:"issued,omitempty"`
	Sent         int     `json:"sent,omitempty"`
	Dropped      int     `json:"dropped,omitempty"`
	ServiceP50Ms float64 `json:"serviceP50Ms,omitempty"`
	ServiceP99Ms float64 `json:"serviceP99Ms,omitempty"`
	// CPUMsPerKOp is the CPU time the three members used during a
	// throughput row (user + system, summed over them) per 1,000 successful
	// operations: what an operation costs the servers, whatever the number
	// of cores they share.
	CPUMsPerKOp float64 `json:"cpuMsPerKOp,omitempty"`
}

// openSummary is summary for an open loop: the rate offered and achieved.
func (s *stats) openSummary() string {
	out := fmt.Sprintf("offered %s/s, achieved %s/s; p50 %.2f ms, p99 %.2f ms, max %.2f ms from the due time (service p99 %.2f ms); %d ok, %d errors, %d dropped",
		thousands(s.TargetPerSec), thousands(s.OpsPerSec), s.P50Ms, s.P99Ms, s.MaxMs, s.ServiceP99Ms, s.Ops, s.Errors, s.Dropped)
	if s.Errors > 0 {
		out += " (" + s.errorText() + ")"
	}
	return out
}

func (s *stats) summary() string {
	out := fmt.Sprintf("%s ops/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %d ops, %d errors",
		thousands(s.OpsPerSec), s.P50Ms, s.P99Ms, s.MaxMs, s.Ops, s.Errors)
	if s.Errors > 0 {
		out += " (" + s.errorText() + ")"
	}
	return out
}

// errorText names the most frequent errors.
func (s *stats) errorText() string {
	kinds := slices.Collect(maps.Keys(s.ErrorKinds))
	slices.SortFunc(kinds, func(a, b string) int { return s.ErrorKinds[b] - s.ErrorKinds[a] })
	var parts []string
	for i, k := range kinds {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%d× %s", s.ErrorKinds[k], k))
	}
	return strings.Join(parts, "; ")
}

// addError counts err under its (shortened) text.
func (s *stats) addError(err error) {
	if s.ErrorKinds == nil {
		s.ErrorKinds = map[string]int{}
	}
	text := err.Error()
	if len(text) > 120 {
		text = text[:120] + "…"
	}
	s.ErrorKinds[text]++
	s.Errors++
}

// runLoad runs every step in its own goroutine, each in a closed loop (the
// next request when the last one answered), for d. A request started before
// the end is allowed to finish and counts. tick is called about every second.
func runLoad(ctx context.Context, steps []step, d time.Duration, tick func(elapsed time.Duration, ops, errs int64)) *stats {
	type worker struct {
		lat []time.Duration
		st  stats
	}
	workers := make([]worker, len(steps))
	var ops, errs atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	drive(len(steps), start, &ops, &errs, tick, func(i int) {
		st, w := steps[i], &workers[i]
		for ctx.Err() == nil && time.Now().Before(deadline) {
			t0 := time.Now()
			err := st(ctx)
			lat := time.Since(t0)
			if err != nil {
				w.st.addError(err)
				errs.Add(1)
				continue
			}
			w.lat = append(w.lat, lat)
			ops.Add(1)
		}
	})
	elapsed := time.Since(start)
	res := &stats{Seconds: elapsed.Seconds()}
	var all []time.Duration
	for i := range workers {
		all = append(all, workers[i].lat...)
		res.addErrors(&workers[i].st)
	}
	res.setLatencies(all, elapsed.Seconds())
	return res
}

// rowNode is the member every client of row talks to: the leader on the
// single row, -1 (the clients spread over the members) on the others.
func rowNode(ctx context.Context, sys system, row string) (int, error) {
	if row != rowSingle {
		return -1, nil
	}
	return sys.Leader(ctx)
}

// drive runs work(i) for every i in [0, n), each in its own goroutine, and
// returns once all have returned; meanwhile it calls tick about every second
// with the time since start and the counts of ops and errs so far.
func drive(n int, start time.Time, ops, errs *atomic.Int64, tick func(elapsed time.Duration, ops, errs int64), work func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(i)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-t.C:
			tick(time.Since(start), ops.Load(), errs.Load())
		}
	}
}

// addErrors adds o's errors to s's.
func (s *stats) addErrors(o *stats) {
	s.Errors += o.Errors
	for k, n := range o.ErrorKinds {
		if s.ErrorKinds == nil {
			s.ErrorKinds = map[string]int{}
		}
		s.ErrorKinds[k] += n
	}
}

// setLatencies sets Ops to the number of successes lat (which it sorts)
// holds and, when there are any, OpsPerSec over seconds and the latency
// quantiles.
func (s *stats) setLatencies(lat []time.Duration, seconds float64) {
	s.Ops = len(lat)
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	s.OpsPerSec = float64(len(lat)) / seconds
	s.P50Ms = ms(quantile(lat, 0.50))
	s.P99Ms = ms(quantile(lat, 0.99))
	s.MaxMs = ms(lat[len(lat)-1])
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// runParallel calls fn(i) for every i in [0, n) from clients goroutines and
// returns the first error. progress is called after every hundredth call.
func runParallel(ctx context.Context, n, clients int, fn func(ctx context.Context, worker, i int) error, progress func(done int)) error {
	var next, done atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var mu sync.Mutex // serialises progress
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, w, i); err != nil {
					cancel(fmt.Errorf("record %d: %w", i, err))
					return
				}
				if d := done.Add(1); d%100 == 0 && progress != nil {
					mu.Lock()
					progress(int(d))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}
