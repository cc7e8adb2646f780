package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs is every server process the run started, by pid, so that all of them
// are killed on exit, including on Ctrl-C. Its methods may be called
// concurrently.
type procs struct {
	mu      sync.Mutex
	running map[int]*proc // guarded by mu
}

// proc is one started process; exited is closed once it has been waited for.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func newProcs() *procs { return &procs{running: map[int]*proc{}} }

// start runs bin with args, its output appended to logPath, in its own
// process group (so a terminal's Ctrl-C reaches only this driver, which then
// kills it) and with SIGKILL as its parent-death signal.
func (p *procs) start(bin string, args []string, env []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== compare-etcd: start %s at %s\n", filepath.Base(bin), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	pr := &proc{cmd: cmd, exited: make(chan struct{})}
	p.mu.Lock()
	p.running[cmd.Process.Pid] = pr
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		fmt.Fprintf(logf, "=== compare-etcd: exited: %v\n", cmd.ProcessState)
		logf.Close()
		p.mu.Lock()
		delete(p.running, cmd.Process.Pid)
		p.mu.Unlock()
		close(pr.exited)
	}()
	return pr, nil
}

// pid is the process id.
func (pr *proc) pid() int { return pr.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (pr *proc) alive() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the process (by its pid) and waits until it has
// exited.
func (pr *proc) kill() error {
	if !pr.alive() {
		return nil
	}
	if err := syscall.Kill(pr.pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill pid %d: %w", pr.pid(), err)
	}
	select {
	case <-pr.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d did not exit 10 s after SIGKILL", pr.pid())
	}
}

// terminate sends SIGTERM to the process (by its pid) and waits up to
// timeout for it to exit; past that it kills it and says so.
func (pr *proc) terminate(timeout time.Duration) error {
	if !pr.alive() {
		return nil
	}
	if err := syscall.Kill(pr.pid(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("terminate pid %d: %w", pr.pid(), err)
	}
	select {
	case <-pr.exited:
		return nil
	case <-time.After(timeout):
		_ = pr.kill()
		return fmt.Errorf("pid %d did not exit %s after SIGTERM; killed", pr.pid(), timeout)
	}
}

// killAll kills every process still running.
func (p *procs) killAll() {
	p.mu.Lock()
	var all []*proc
	for _, pr := range p.running {
		all = append(all, pr)
	}
	p.mu.Unlock()
	for _, pr := range all {
		_ = pr.kill()
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, chosen by the
// kernel from its ephemeral range. Ports of `elanous-node dev` (31412–31433)
// and of the fault suite (31513–31533) are never returned.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 31400 && port <= 31599 {
			continue
		}
		ports = append(ports, port)
	}
	return ports, nil
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
