package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Names and addresses of the network. They are constants so that a crashed
// run's leftovers can always be found and removed.
const (
	Prefix   = "eln-"
	Hub      = "eln-hub"
	Bridge   = "eln-br0"
	HostLink = "eln-host"
	HostIP   = "10.77.0.1"
	subnet   = "10.77.0.0/24"
)

// Host is one node's namespace.
type Host struct {
	Index int    // 0-based
	NS    string // namespace name
	IP    string
}

// Net is the network of one run. Its methods may be called concurrently.
type Net struct {
	Hosts []Host

	mu     sync.Mutex
	delays map[int]*delayer // guarded by mu
	lock   *os.File         // flocked while the network exists
}

// lockPath serialises networks: every Net uses the same names, so a second
// Setup (another suite run, or this package's tests) waits for Close.
var lockPath = filepath.Join(os.TempDir(), "elanous-chaos-netns.lock")

// NodeNS names node i's namespace.
func NodeNS(i int) string { return fmt.Sprintf("eln-n%d", i+1) }

// NodeIP is node i's address.
func NodeIP(i int) string { return fmt.Sprintf("10.77.0.%d", 11+i) }

// EnsureTools installs iproute2 and iptables with apt-get when ip, iptables
// or tc is missing.
func EnsureTools() error {
	var missing []string
	for _, t := range []string{"ip", "iptables", "tc"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "chaos: %s missing, installing iproute2 and iptables\n", strings.Join(missing, ", "))
	if err := run("apt-get", "update", "-qq"); err != nil {
		return err
	}
	return run("apt-get", "install", "-y", "-qq", "iproute2", "iptables")
}

// Setup creates the hub, its bridge, the harness's link and n node
// namespaces. It first removes whatever a previous run left behind.
func Setup(n int) (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the chaos network needs root")
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	Cleanup()
	nt := &Net{delays: map[int]*delayer{}, lock: lock}
	steps := [][]string{
		{"ip", "netns", "add", Hub},
		{"ip", "-n", Hub, "link", "set", "lo", "up"},
		{"ip", "-n", Hub, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", Hub, "link", "set", Bridge, "up"},
		{"ip", "link", "add", HostLink, "type", "veth", "peer", "name", "eln-hostp", "netns", Hub},
		{"ip", "-n", Hub, "link", "set", "eln-hostp", "master", Bridge, "up"},
		{"ip", "addr", "add", HostIP + "/24", "dev", HostLink},
		{"ip", "link", "set", HostLink, "up"},
	}
	for i := 0; i < n; i++ {
		ns, ip, v := NodeNS(i), NodeIP(i), fmt.Sprintf("eln-v%d", i+1)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", Hub, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", Hub, "link", "set", v, "master", Bridge, "up"},
			[]string{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		)
		nt.Hosts = append(nt.Hosts, Host{Index: i, NS: ns, IP: ip})
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			nt.Close()
			return nil, fmt.Errorf("set up network: %w", err)
		}
	}
	return nt, nil
}

// Close stops the delayers and removes every namespace and link of the
// network.
func (n *Net) Close() {
	n.mu.Lock()
	for i, d := range n.delays {
		d.stop()
		delete(n.delays, i)
	}
	n.mu.Unlock()
	Cleanup()
	if n.lock != nil {
		n.lock.Close() // releases the flock
		n.lock = nil
	}
}

// Cleanup removes every namespace and link named with Prefix, with the
// processes still running inside those namespaces (only the suite starts
// processes there).
func Cleanup() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix) {
			continue
		}
		ns := f[0]
		if pids, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, p := range strings.Fields(string(pids)) {
				var pid int
				if _, err := fmt.Sscan(p, &pid); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	_ = exec.Command("ip", "link", "del", HostLink).Run()
}

// Command returns a command that runs name inside host i's namespace.
func (n *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Hosts[i].NS, name}, args...)...)
}

// inNS runs a command inside host i's namespace and returns its error with
// its output.
func (n *Net) inNS(i int, name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", n.Hosts[i].NS, name}, args...)...)
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
