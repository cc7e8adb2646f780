// Command etcdcompare is the driver behind scripts/bench/compare-etcd: it runs a
// three-member etcd cluster (3.4 from Debian's etcd-server, 3.6 built from the
// Go module proxy) and a three-candidate elanous-node cluster on loopback, one
// after the other, drives both with the same client shapes, and prints one
// table of ops/s, p50 and p99 per row with the ratio elanous / best etcd.
//
// It is its own Go module so the etcd client and server stay out of the
// product's go.mod; the wrapper script builds and runs it.
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
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == watchHolderFlag:
		err = runWatchHolder(ctx, os.Stdin, os.Stdout)
	case len(os.Args) >= 3 && len(os.Args) <= 4 && os.Args[1] == noopServeFlag:
		forward := ""
		if len(os.Args) == 4 {
			forward = os.Args[3]
		}
		err = runNoopServer(ctx, os.Args[2], forward)
	default:
		err = run(ctx, os.Args[1:])
	}
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare-etcd:", err)
		os.Exit(1)
	}
}
