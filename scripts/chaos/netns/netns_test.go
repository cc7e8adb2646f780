package netns

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a tiny network tool run inside a namespace:
// ELN_NETNS_HELPER=listen:ADDR accepts and closes connections,
// ELN_NETNS_HELPER=dial:ADDR prints how long a connect took, or "fail".
func TestMain(m *testing.M) {
	if h := os.Getenv("ELN_NETNS_HELPER"); h != "" {
		mode, addr, _ := strings.Cut(h, ":")
		switch mode {
		case "listen":
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Println("fail", err)
				os.Exit(1)
			}
			fmt.Println("ready")
			for {
				c, err := ln.Accept()
				if err != nil {
					os.Exit(0)
				}
				c.Close()
			}
		case "dial":
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				fmt.Println("fail")
				os.Exit(0)
			}
			c.Close()
			fmt.Println(time.Since(start).Milliseconds())
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
}

func listen(t *testing.T, n *Net, i int, port int) {
	t.Helper()
	cmd := n.Command(i, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("ELN_NETNS_HELPER=listen:%s:%d", n.Hosts[i].IP, port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("listener in %s: %q", n.Hosts[i].NS, line)
	}
}

// dial connects from host i to addr and returns the connect time, or -1.
func dial(t *testing.T, n *Net, i int, addr string) time.Duration {
	t.Helper()
	cmd := n.Command(i, os.Args[0])
	cmd.Env = append(os.Environ(), "ELN_NETNS_HELPER=dial:"+addr)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dial from %s: %v", n.Hosts[i].NS, err)
	}
	s := strings.TrimSpace(string(out))
	if s == "fail" {
		return -1
	}
	var ms int64
	fmt.Sscan(s, &ms)
	return time.Duration(ms) * time.Millisecond
}

func TestNet_Faults(t *testing.T) {
	needRoot(t)
	n, err := Setup(3)
	if err != nil {
		t.Fatalf("Setup(3) = %v", err)
	}
	t.Cleanup(n.Close)
	for i := range n.Hosts {
		listen(t, n, i, 31413)
	}
	addr := func(i int) string { return n.Hosts[i].IP + ":31413" }

	// The harness reaches every node; nodes reach each other.
	for i := range n.Hosts {
		c, err := net.DialTimeout("tcp", addr(i), time.Second)
		if err != nil {
			t.Fatalf("dial %s from the harness: %v", addr(i), err)
		}
		c.Close()
	}
	if d := dial(t, n, 0, addr(1)); d < 0 {
		t.Fatalf("dial n1 -> n2 failed before any fault")
	}

	if err := n.Isolate(0); err != nil {
		t.Fatalf("Isolate(0) = %v", err)
	}
	if d := dial(t, n, 0, addr(1)); d >= 0 {
		t.Errorf("dial n1 -> n2 after Isolate(0) took %v, want failure", d)
	}
	if d := dial(t, n, 2, addr(1)); d < 0 {
		t.Errorf("dial n3 -> n2 after Isolate(0) failed, want success")
	}
	if c, err := net.DialTimeout("tcp", addr(0), time.Second); err != nil {
		t.Errorf("harness -> isolated n1: %v, want success", err)
	} else {
		c.Close()
	}

	if err := n.Heal(); err != nil {
		t.Fatalf("Heal() = %v", err)
	}
	if d := dial(t, n, 0, addr(1)); d < 0 {
		t.Errorf("dial n1 -> n2 after Heal failed")
	}

	// A delay on n2's outgoing packets slows n1's connect by one SYN-ACK.
	if err := n.Delay(1, 150*time.Millisecond, 20*time.Millisecond); err != nil {
		t.Fatalf("Delay(1) = %v", err)
	}
	if d := dial(t, n, 0, addr(1)); d < 100*time.Millisecond {
		t.Errorf("dial n1 -> n2 under 150ms delay took %v, want >= 100ms", d)
	}
	if err := n.Heal(); err != nil {
		t.Fatalf("Heal() = %v", err)
	}
	if d := dial(t, n, 0, addr(1)); d < 0 || d > 100*time.Millisecond {
		t.Errorf("dial n1 -> n2 after healing the delay took %v", d)
	}
	if err := n.Loss(1, 1.0); err != nil {
		t.Fatalf("Loss(1, 1) = %v", err)
	}
	if d := dial(t, n, 0, addr(1)); d >= 0 {
		t.Errorf("dial n1 -> n2 under 100%% loss took %v, want failure", d)
	}
}

func TestCleanup_RemovesEverything(t *testing.T) {
	needRoot(t)
	n, err := Setup(2)
	if err != nil {
		t.Fatalf("Setup(2) = %v", err)
	}
	n.Close()
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), Prefix) {
		t.Errorf("namespaces left after Close: %s", out)
	}
	if err := exec.Command("ip", "link", "show", HostLink).Run(); err == nil {
		t.Errorf("link %s left after Close", HostLink)
	}
}
