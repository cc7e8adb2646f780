package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// procMemory is a process's resident set from /proc/PID/status: VmRSS now
// and VmHWM, its peak since it started or since resetPeakRSS.
type procMemory struct {
	RSSBytes, PeakBytes int64
}

// readProcMemory reads pid's VmRSS and VmHWM; ok is false when the process
// is gone or /proc cannot be read.
func readProcMemory(pid int) (procMemory, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procMemory{}, false
	}
	st, err := p.NewStatus()
	if err != nil {
		return procMemory{}, false
	}
	return procMemory{RSSBytes: int64(st.VmRSS), PeakBytes: int64(st.VmHWM)}, true
}

// resetPeakRSS sets pid's VmHWM to its current RSS (writing 5 to
// /proc/PID/clear_refs, Linux 4.0 and later), so that a later VmHWM is the
// peak of the window that starts now. It reports whether the kernel took it.
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// nodeSample is one node's footprint at one instant.
type nodeSample struct {
	Node     string `json:"node"`
	PID      int    `json:"pid"`
	RSSBytes int64  `json:"rssBytes"`
	DBBytes  int64  `json:"dbBytes"`
}

// nodePeak is one node's footprint over a window: the largest of the samples
// and, when the kernel let the window's start reset it, the process's own
// peak RSS (VmHWM) at the end, which also sees what happened between samples.
type nodePeak struct {
	Node string `json:"node"`
	// MaxRSSBytes is the largest sampled VmRSS; MaxRSSAtSeconds when, from
	// the window's start.
	MaxRSSBytes     int64   `json:"maxRssBytes"`
	MaxRSSAtSeconds float64 `json:"maxRssAtSeconds"`
	// PeakRSSBytes is VmHWM at the window's end, reset at its start; 0 when
	// it could not be reset or the process restarted within the window.
	PeakRSSBytes int64 `json:"peakRssBytes,omitempty"`
	// MaxDBBytes is the largest sampled size of the store file (raft.db).
	MaxDBBytes     int64   `json:"maxDbBytes"`
	MaxDBAtSeconds float64 `json:"maxDbAtSeconds"`
	// LastRSSBytes and LastDBBytes are the last sample's.
	LastRSSBytes int64 `json:"lastRssBytes"`
	LastDBBytes  int64 `json:"lastDbBytes"`
	Samples      int   `json:"samples"`
	// PIDs lists every process id the node had within the window: more than
	// one means it restarted.
	PIDs []int `json:"pids"`
}

// HighestRSS is the window's highest RSS: the larger of the sampled maximum
// and the kernel's peak.
func (p nodePeak) HighestRSS() int64 { return max(p.MaxRSSBytes, p.PeakRSSBytes) }

// peaks folds samples into per-node maxima, in the order nodes first appear.
// It is not safe for concurrent use; sampler serialises it.
type peaks struct {
	start time.Time
	nodes []nodePeak
}

// observe records one round of samples taken at.
func (p *peaks) observe(at time.Time, round []nodeSample) {
	for _, s := range round {
		i := -1
		for j := range p.nodes {
			if p.nodes[j].Node == s.Node {
				i = j
			}
		}
		if i < 0 {
			p.nodes = append(p.nodes, nodePeak{Node: s.Node})
			i = len(p.nodes) - 1
		}
		n := &p.nodes[i]
		offset := at.Sub(p.start).Seconds()
		if s.PID != 0 && (len(n.PIDs) == 0 || n.PIDs[len(n.PIDs)-1] != s.PID) {
			n.PIDs = append(n.PIDs, s.PID)
		}
		if s.RSSBytes > n.MaxRSSBytes {
			n.MaxRSSBytes, n.MaxRSSAtSeconds = s.RSSBytes, offset
		}
		if s.DBBytes > n.MaxDBBytes {
			n.MaxDBBytes, n.MaxDBAtSeconds = s.DBBytes, offset
		}
		n.LastRSSBytes, n.LastDBBytes = s.RSSBytes, s.DBBytes
		n.Samples++
	}
}

// sampler samples every node's footprint every interval in its own goroutine
// until stop. At its start it resets each process's peak RSS, and at stop it
// reads it back for the nodes that kept one process throughout.
type sampler struct {
	read   func() []nodeSample
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	p      peaks // guarded by mu
	reset  map[int]bool
}

// startSampler takes a first sample at once, then one every interval.
func startSampler(ctx context.Context, every time.Duration, read func() []nodeSample) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{read: read, cancel: cancel, done: make(chan struct{}), reset: map[int]bool{}}
	s.p.start = time.Now()
	first := read()
	for _, n := range first {
		if n.PID != 0 {
			s.reset[n.PID] = resetPeakRSS(n.PID)
		}
	}
	s.p.observe(time.Now(), read()) // after the reset, so the first sample is the window's
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				round := read()
				s.mu.Lock()
				s.p.observe(time.Now(), round)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// current returns the per-node figures so far (for progress lines).
func (s *sampler) current() []nodePeak {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]nodePeak, len(s.p.nodes))
	copy(out, s.p.nodes)
	return out
}

// stop takes a last sample, ends the goroutine and returns each node's
// figures over the window.
func (s *sampler) stop() []nodePeak {
	s.cancel()
	<-s.done
	last := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.observe(time.Now(), last)
	for i := range s.p.nodes {
		n := &s.p.nodes[i]
		if len(n.PIDs) != 1 || !s.reset[n.PIDs[0]] {
			continue
		}
		if m, ok := readProcMemory(n.PIDs[0]); ok {
			n.PeakRSSBytes = m.PeakBytes
		}
	}
	return s.p.nodes
}
