package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// releaseTimeout bounds the release when a held lease is let go.
const releaseTimeout = 10 * time.Second

func newLeaseCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "lease",
		Short: "Acquire, release or list port leases",
		Long: `Port leases hand out ports of the test band (default 31450-31499), each held
by one owner under a TTL, renewed by heartbeat and released by DELETE.
acquire and release need a member-scope token, list and check a query-scope
one. check tells a downstream system whether a grant's fence is still
current (exit 0 valid, 1 stale, 2 could not check).`,
		Example: `  elanous-node lease acquire --machine mbp --purpose e2e --hold
  elanous-node lease list
  elanous-node lease release --port 31450 --lease-id <id>
  elanous-node lease check --port 31450 --fence 1234`,
	}, newLeaseAcquireCmd(), newLeaseReleaseCmd(), newLeaseListCmd(), newLeaseCheckCmd())
}

func newLeaseAcquireCmd() *cobra.Command {
	var (
		flags            clientFlags
		machine, purpose string
		exclude          string
		ttl, renewEvery  time.Duration
		hold, asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "acquire --machine M --purpose P [--ttl DUR] [--exclude PORTS] [--hold [--renew-interval DUR]] [--json]",
		Short: "Lease the lowest free port of the test band and print it",
		Long: `Lease the lowest free port of the test band and print the lease (one JSON
line with --json). Without --hold the lease lives for --ttl unless renewed
(POST /v1/leases/port/{port}/heartbeat with its lease id) or released.

With --hold the command keeps the lease renewed — every --renew-interval,
retrying failures, re-resolving the primary after a failover, following the
cluster's candidate list (GET /v1/cluster/peers) — until it is
interrupted (SIGINT or SIGTERM), then releases it. If the lease is lost (the
server refuses a renewal, or none succeeds before the TTL runs out) the
command fails.`,
		Example: `  # hold a port for a test run, release it on Ctrl-C
  elanous-node lease acquire --machine mbp --purpose e2e --hold

  # a script: take a port, remember the lease id
  lease=$(elanous-node lease acquire --machine mbp --purpose bench --ttl 1h --json)
  port=$(echo "$lease" | jq .port)`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			excluded, err := parsePorts(exclude)
			if err != nil {
				return err
			}
			if ttl <= 0 {
				return errors.New("--ttl must be positive")
			}
			if strings.TrimSpace(purpose) == "" {
				return errors.New("--purpose is required")
			}
			env, err := flags.env(cmd, member.ScopeMember)
			if err != nil {
				return err
			}
			if machine == "" && env.join != nil {
				machine = env.join.Machine
			}
			if machine == "" {
				return errors.New("--machine is required (the join file names no machine)")
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			key, err := idempotencyKey()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			var lease wire.PortLease
			err = withRetry(ctx, c, func(ctx context.Context) (err error) {
				lease, err = c.AcquirePortLease(ctx, wire.AcquireRequest{
					Machine: machine, Purpose: purpose, TTLMs: ttl.Milliseconds(), Excluded: excluded,
				}, key)
				return err
			})
			cancel()
			if err != nil {
				return fmt.Errorf("acquire a port lease: %w", explain(err, member.ScopeMember))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, lease); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "port %d leased to %s for %s (lease id %s, expires %s, generation %d, fence %d)\n",
					lease.Port, lease.Machine, lease.Purpose, lease.LeaseID, msTime(lease.ExpiresAt), lease.Generation, lease.Fence)
			}
			if !hold {
				return nil
			}
			return holdLease(cmd, c, lease, time.Duration(lease.TTLMs)*time.Millisecond, renewEvery)
		},
	}
	flags.bind(cmd)
	fs := cmd.Flags()
	fs.StringVar(&machine, "machine", "", "machine the lease is for (default: the join file's machine)")
	fs.StringVar(&purpose, "purpose", "", "what the port is for (required)")
	fs.DurationVar(&ttl, "ttl", member.DefaultLeaseTTL, "lease TTL (the server caps it at 24h)")
	fs.StringVar(&exclude, "exclude", "", "comma-separated ports of the band not to hand out (e.g. ones a local bind probe found busy)")
	fs.BoolVar(&hold, "hold", false, "keep the lease renewed until interrupted, then release it")
	fs.BoolVar(&asJSON, "json", false, "print the lease as one line of JSON")
	fs.DurationVar(&renewEvery, "renew-interval", 0, "renewal period with --hold (default 30s, shorter for a short --ttl)")
	return cmd
}

// holdLease renews the lease until the command's context ends, then
// releases it; it fails if the lease is lost.
func holdLease(cmd *cobra.Command, c *member.Client, lease wire.PortLease, ttl, interval time.Duration) error {
	margin := min(member.LeaseExpiryMargin, ttl/3)
	if interval == 0 {
		interval = min(member.DefaultLeaseInterval, (ttl-margin)/2)
	}
	progress := cmd.ErrOrStderr()
	lost := make(chan error, 1)
	keeper, err := member.StartPortLease(cmd.Context(), lease.Port, lease.LeaseID, member.PortLeaseConfig{
		Client: c, TTL: ttl, Margin: margin, Interval: interval, Retry: min(member.DefaultLeaseRetry, interval),
		OnError:     func(err error) { fmt.Fprintf(progress, "renewal failed (will retry): %v\n", err) },
		OnLeaseLost: func(err error) { lost <- err },
	})
	if err != nil {
		// Best effort: do not leave the port held until its TTL runs out.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
		defer cancel()
		_ = c.ReleasePortLease(ctx, lease.Port, lease.LeaseID)
		return fmt.Errorf("hold port %d: %w", lease.Port, err)
	}
	fmt.Fprintf(progress, "holding port %d, renewing every %v; interrupt (Ctrl-C) to release it\n", lease.Port, interval)
	// The candidate list follows the cluster's while the lease is held (in
	// memory only), so a replaced candidate does not strand the renewals.
	followCtx, stopFollow := context.WithCancel(cmd.Context())
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		if c.Resolver() != nil {
			_ = c.FollowCandidates(followCtx, member.CandidateRefresh{})
		}
	}()
	defer func() {
		stopFollow()
		<-followed
	}()
	var lostErr error
	select {
	case <-cmd.Context().Done():
	case lostErr = <-lost:
		fmt.Fprintf(progress, "lost the lease on port %d: %v\n", lease.Port, lostErr)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
	defer cancel()
	relErr := keeper.Stop(ctx)
	switch {
	case lostErr != nil:
		return fmt.Errorf("port %d: the lease was lost: %w", lease.Port, lostErr)
	case relErr != nil:
		return relErr
	}
	fmt.Fprintf(progress, "released port %d\n", lease.Port)
	return nil
}

// idempotencyKey makes a repeated acquire (the retry after a failover)
// return the lease the first attempt created.
func idempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idempotency key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// parsePorts reads "31450,31452".
func parsePorts(raw string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(raw, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || !wire.ValidPort(p) {
			return nil, fmt.Errorf("--exclude: %q is not a port", f)
		}
		out = append(out, p)
	}
	return out, nil
}

func newLeaseReleaseCmd() *cobra.Command {
	var (
		port    int
		leaseID string
	)
	cmd := newClientCmd(clientCmd[struct{}]{
		cmd: &cobra.Command{
			Use:                   "release --port N --lease-id ID",
			Short:                 "Release a port lease",
			Example:               `  elanous-node lease release --port 31450 --lease-id 5f0c…`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (struct{}, error) {
			_, err := runCall(cmd, flags, member.ScopeMember, fmt.Sprintf("release port %d", port), func(ctx context.Context, c *member.Client) (struct{}, error) {
				return struct{}{}, c.ReleasePortLease(ctx, port, leaseID)
			})
			switch member.StatusCode(err) {
			case 404:
				return struct{}{}, fmt.Errorf("release port %d: no lease on that port (already released or expired)", port)
			case 409:
				return struct{}{}, fmt.Errorf("release port %d: the port is held under another lease id", port)
			}
			return struct{}{}, err
		},
		text: func(cmd *cobra.Command, _ []string, _ struct{}) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "released port %d\n", port)
			return err
		},
	})
	cmd.Flags().IntVar(&port, "port", 0, "leased port (required)")
	cmd.Flags().StringVar(&leaseID, "lease-id", "", "lease id from acquire (required)")
	_ = cmd.MarkFlagRequired("port")
	_ = cmd.MarkFlagRequired("lease-id")
	return cmd
}

func newLeaseListCmd() *cobra.Command {
	return newList(listCommand[wire.PortLease]{
		cmd: &cobra.Command{
			Short: "List the live port leases",
			Example: `  elanous-node lease list --json | jq '.[].port'
  elanous-node lease list --stale`,
		},
		scope:  member.ScopeQuery,
		what:   "leases",
		fetch:  (*member.Client).ListPortLeases,
		header: "PORT\tMACHINE\tPURPOSE\tLEASE ID\tEXPIRES\tGENERATION\tFENCE",
		row: func(w io.Writer, l wire.PortLease) {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%d\n", l.Port, l.Machine, l.Purpose, l.LeaseID, msTime(l.ExpiresAt), l.Generation, l.Fence)
		},
	})
}
