// Command chaos is elanous-node's fault suite: it runs a real cluster of
// `elanous-node serve` processes, each in its own network namespace, drives
// it with concurrent clients, injects one scenario's faults, heals, and checks
// what the clients saw (porcupine linearizability, lease intervals,
// generations, renewal promises) and what the nodes hold (equal state hashes, every
// acknowledged write, no panic).
//
//	scripts/chaos/run --scenario all --duration 20s --report r.json
//
// It needs root (namespaces, iptables, mounts). Run --list for the scenarios.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == fenceHolderCmd {
		return fenceHolder(ctx, args[1:])
	}
	opt, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	s := &suite{opt: opt}
	return s.run(ctx)
}
