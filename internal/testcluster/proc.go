package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// KillWait bounds how long Kill waits for a SIGKILLed process to be reaped.
const KillWait = 10 * time.Second

// ErrKilled is wrapped by Stop's error when the process outlived its bound
// after SIGTERM and was SIGKILLed.
var ErrKilled = errors.New("killed")

// Spec is a process to start.
type Spec struct {
	// Name names the process in errors and banner lines.
	Name string
	// Path and Args are the command; Env its environment (nil: this
	// process's).
	Path string
	Args []string
	Env  []string
	// Command, when set, makes the command instead of exec.Command (the fault
	// suite runs each node inside its network namespace).
	Command func(name string, args ...string) *exec.Cmd
	// Stdout and Stderr are the files the output is appended to (created
	// with mode 0600 when missing); Stderr "" or equal to Stdout: one file.
	Stdout, Stderr string
	// Group runs the process in its own process group with SIGKILL as its
	// parent-death signal, and sends every signal to the group: a terminal's
	// Ctrl-C then reaches only the caller, which stops its processes.
	Group bool
	// Banner, when set, writes "=== Banner: start Name at <time>" to Stdout
	// before the start and "=== Banner: Name exited: <state>" after the exit.
	Banner string
}

// Proc is one started process. Its methods may be called concurrently.
type Proc struct {
	spec Spec
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result; read only after done is closed

	mu     sync.Mutex
	paused bool // guarded by mu
}

// Start starts spec's command. The process is reaped in the background;
// Done is closed once it has exited and its log files are closed.
func Start(spec Spec) (*Proc, error) {
	outF, err := os.OpenFile(spec.Stdout, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	errF := outF
	if spec.Stderr != "" && spec.Stderr != spec.Stdout {
		if errF, err = os.OpenFile(spec.Stderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			outF.Close()
			return nil, err
		}
	}
	closeLogs := func() {
		outF.Close()
		if errF != outF {
			errF.Close()
		}
	}
	newCmd := spec.Command
	if newCmd == nil {
		newCmd = exec.Command
	}
	cmd := newCmd(spec.Path, spec.Args...)
	if spec.Env != nil {
		cmd.Env = spec.Env
	}
	cmd.Stdout, cmd.Stderr = outF, errF
	if spec.Group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if spec.Banner != "" {
		fmt.Fprintf(outF, "=== %s: start %s at %s\n", spec.Banner, spec.Name, time.Now().Format(time.RFC3339Nano))
	}
	if err := cmd.Start(); err != nil {
		closeLogs()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Proc{spec: spec, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if spec.Banner != "" {
			fmt.Fprintf(outF, "=== %s: %s exited: %v\n", spec.Banner, spec.Name, cmd.ProcessState)
		}
		closeLogs()
		close(p.done)
	}()
	return p, nil
}

// Name is the spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// Spec is what the process was started from.
func (p *Proc) Spec() Spec { return p.spec }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit code once the process has exited (-1 when a signal
// ended it, or while it runs).
func (p *Proc) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Err is the error the process's Wait returned (nil while it runs).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process (to its group with Spec.Group) unless it
// has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	pid := p.Pid()
	if p.spec.Group {
		pid = -pid
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to %s: %w", sig, p.spec.Name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.setPaused(true)
	case syscall.SIGCONT:
		p.setPaused(false)
	}
	return nil
}

func (p *Proc) setPaused(v bool) {
	p.mu.Lock()
	p.paused = v
	p.mu.Unlock()
}

// Wait waits up to timeout for the process to exit and returns its exit
// code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-timer.C:
		return 0, fmt.Errorf("%s still running after %s", p.spec.Name, timeout)
	}
}

// Kill sends SIGKILL and waits up to KillWait until the process is gone.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if _, err := p.Wait(KillWait); err != nil {
		return fmt.Errorf("after SIGKILL: %w", err)
	}
	return nil
}

// Stop resumes the process if it is paused, sends SIGTERM and waits up to
// timeout for it to exit. Past that it SIGKILLs it and returns an error
// wrapping ErrKilled. A process that exits by itself, whatever its code,
// returns nil (ExitCode tells the code).
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := p.Resume(); err != nil {
		return err
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if _, err := p.Wait(timeout); err == nil {
		return nil
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s did not exit within %s of SIGTERM: %w", p.spec.Name, timeout, ErrKilled)
}

// Pause sends SIGSTOP.
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume sends SIGCONT if the process is paused.
func (p *Proc) Resume() error {
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if !paused {
		return nil
	}
	return p.Signal(syscall.SIGCONT)
}

// Paused reports whether the process was paused and not resumed since.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && !p.Exited()
}

// Restart kills the process and starts its spec again: the same command,
// config and data dir, its output appended to the same files.
func (p *Proc) Restart() (*Proc, error) {
	if err := p.Kill(); err != nil {
		return nil, err
	}
	return Start(p.spec)
}
