package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// procs is every server process the run started, so that all of them are
// killed on exit, including on Ctrl-C. Its methods may be called
// concurrently.
type procs struct {
	mu      sync.Mutex
	running map[*testcluster.Proc]bool // guarded by mu
}

func newProcs() *procs { return &procs{running: map[*testcluster.Proc]bool{}} }

// start runs bin with args, its output appended to logPath, in its own
// process group (so a terminal's Ctrl-C reaches only this driver, which then
// kills it) and with SIGKILL as its parent-death signal.
func (p *procs) start(bin string, args []string, env []string, logPath string) (*testcluster.Proc, error) {
	pr, err := testcluster.Start(testcluster.Spec{Name: filepath.Base(bin), Path: bin, Args: args, Env: env,
		Stdout: logPath, Group: true, Banner: "compare-etcd"})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.running[pr] = true
	p.mu.Unlock()
	go func() {
		<-pr.Done()
		p.mu.Lock()
		delete(p.running, pr)
		p.mu.Unlock()
	}()
	return pr, nil
}

// killAll kills every process still running.
func (p *procs) killAll() {
	p.mu.Lock()
	var all []*testcluster.Proc
	for pr := range p.running {
		all = append(all, pr)
	}
	p.mu.Unlock()
	for _, pr := range all {
		_ = pr.Kill()
	}
}

// rssBytes reads VmRSS of pid from /proc; 0 when it cannot.
func rssBytes(pid int) int64 {
	m, _ := readProcMemory(pid)
	return m.RSSBytes
}

// fileSize is the size of path; 0 when it does not exist.
func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// nodeUsage is one member's footprint at the end of its system's run.
type nodeUsage struct {
	System   string `json:"system"`
	Node     string `json:"node"`
	PID      int    `json:"pid"`
	RSSBytes int64  `json:"rssBytes"`
	// RSSBeforeKillsBytes is the RSS after the throughput rows, before the
	// failover row restarted members (0 when that row did not run).
	RSSBeforeKillsBytes int64 `json:"rssBeforeKillsBytes,omitempty"`
	// DBName names the main store file: raft.db for elanous, member/snap/db
	// for etcd.
	DBName  string `json:"dbName"`
	DBBytes int64  `json:"dbBytes"`
	// DataBytes is everything in the member's data directory.
	DataBytes int64 `json:"dataBytes"`
	Restarts  int   `json:"restarts"`
}

// printer writes timestamped progress lines.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newPrinter(w io.Writer) *printer { return &printer{w: w, start: time.Now()} }

func (p *printer) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// tail prints the last n lines of a log file.
func (p *printer) tail(path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "--- last lines of %s\n%s\n", filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), strings.Join(lines, "\n"))
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// gitRevision describes the working tree's commit, "-dirty" when changed.
func gitRevision(repo string) string {
	out, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// thousands formats v rounded to an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// mib formats a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
