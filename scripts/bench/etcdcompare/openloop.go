package main

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// openStep is one request of an open-loop worker: k is the request's number
// in the schedule (it picks, say, which resource to heartbeat). It returns
// nil only when the request succeeded, and carries its own deadline.
type openStep func(ctx context.Context, k int) error

// openLoopDrain is how long requests that were due within the run may still
// be sent after its end, when the workers fell behind the schedule; what is
// left after it is counted as dropped.
const openLoopDrain = 10 * time.Second

// schedule is an open loop's timetable: request k is due at start + k/rate,
// for the k whose due time falls within d.
type schedule struct {
	start time.Time
	rate  float64
	d     time.Duration
}

// due is when request k is due.
func (s schedule) due(k int) time.Time {
	return s.start.Add(time.Duration(float64(k) / s.rate * float64(time.Second)))
}

// total is the number of requests due within d.
func (s schedule) total() int {
	n := int(s.rate * s.d.Seconds())
	for n > 0 && !s.due(n-1).Before(s.start.Add(s.d)) {
		n--
	}
	for s.due(n).Before(s.start.Add(s.d)) {
		n++
	}
	return n
}

// runOpenLoop offers requests at a fixed rate for d, whatever the answers
// take (an open loop, as a fleet of members heartbeating on their own
// clocks): request k is due at start + k/rate and is sent by the first free
// worker, at once if it is late. Its latency runs from its due time, so a
// backlog behind slow answers shows in it (no coordinated omission);
// ServiceP50Ms/ServiceP99Ms run from when it was sent. Requests not sent
// within openLoopDrain after d are dropped. OpsPerSec is the successes over
// the time from the start to the last answer. tick is called about every
// second.
func runOpenLoop(ctx context.Context, workers []openStep, rate float64, d time.Duration, tick func(elapsed time.Duration, ops, errs int64)) *stats {
	sch := schedule{start: time.Now(), rate: rate, d: d}
	total := sch.total()
	cutoff := sch.start.Add(d + openLoopDrain)
	type worker struct {
		lat, svc []time.Duration
		st       stats
		last     time.Time
	}
	ws := make([]worker, len(workers))
	var next, ops, errs, sent atomic.Int64
	drive(len(workers), sch.start, &ops, &errs, tick, func(i int) {
		step, w := workers[i], &ws[i]
		for ctx.Err() == nil {
			k := int(next.Add(1) - 1)
			if k >= total {
				return
			}
			due := sch.due(k)
			if wait := time.Until(due); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			t0 := time.Now()
			if t0.After(cutoff) {
				return
			}
			sent.Add(1)
			err := step(ctx, k)
			t1 := time.Now()
			w.last = t1
			if err != nil {
				w.st.addError(err)
				errs.Add(1)
				continue
			}
			w.lat = append(w.lat, t1.Sub(due))
			w.svc = append(w.svc, t1.Sub(t0))
			ops.Add(1)
		}
	})
	res := &stats{TargetPerSec: rate, Issued: total, Sent: int(sent.Load())}
	res.Dropped = total - res.Sent
	var lat, svc []time.Duration
	last := sch.start
	for i := range ws {
		lat = append(lat, ws[i].lat...)
		svc = append(svc, ws[i].svc...)
		res.addErrors(&ws[i].st)
		if ws[i].last.After(last) {
			last = ws[i].last
		}
	}
	res.Seconds = max(last.Sub(sch.start), d).Seconds()
	res.setLatencies(lat, res.Seconds)
	if len(svc) > 0 {
		slices.Sort(svc)
		res.ServiceP50Ms = ms(quantile(svc, 0.50))
		res.ServiceP99Ms = ms(quantile(svc, 0.99))
	}
	return res
}
