package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// benchResult is what one bench run measured.
type benchResult struct {
	Op          string  `json:"op"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Ops         int     `json:"ops"`
	Errors      int     `json:"errors"`
	OpsPerSec   float64 `json:"opsPerSec"`
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	MaxMs       float64 `json:"maxMs"`
}

func newBenchCmd() *cobra.Command {
	var candidates, op, caFile string
	var duration time.Duration
	var concurrency int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure write throughput and latency of a running cluster over HTTP",
		Long: `Drive a running cluster with concurrent clients for a while and print the
operations per second and latency percentiles, with progress every second.

Operations (--op):
  renew      each client acquires one port lease, then renews it in a loop
  register   each client registers one resource, then heartbeats it in a loop
  acquire    each client acquires and releases a lease in a loop

Requests are spread over every candidate given, so followers forward to the
leader as they would for real members. The member-scope token is read from
ELANOUS_TOKEN. Leases and resources made by the run are released at the end.

Against a TLS cluster give the CA (--ca-file, ELANOUS_CA_FILE or tls.ca_file);
the default candidates are then the https:// URLs of a dev cluster.`,
		Example: `  ELANOUS_TOKEN=<member token> elanous-node bench --candidates http://127.0.0.1:31413,http://127.0.0.1:31423,http://127.0.0.1:31433 --duration 10s
  # a "dev --tls" cluster
  ELANOUS_TOKEN=<member token> elanous-node bench --ca-file <dev data dir>/tls/ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := os.Getenv("ELANOUS_TOKEN")
			if token == "" {
				return errors.New("bench needs a member-scope token in ELANOUS_TOKEN")
			}
			_, ctls, err := loadConfigTLS(cmd, loadClientConfig, caFile)
			if err != nil {
				return err
			}
			if ctls.ca != nil && !cmd.Flags().Changed("candidates") {
				candidates = strings.ReplaceAll(candidates, "http://", "https://")
			}
			var urls []string
			for _, u := range strings.Split(candidates, ",") {
				if u = strings.TrimSpace(u); u != "" {
					if _, err := url.Parse(u); err != nil {
						return fmt.Errorf("candidate %q: %w", u, err)
					}
					urls = append(urls, strings.TrimRight(u, "/"))
				}
			}
			if len(urls) == 0 {
				return errors.New("--candidates is required")
			}
			if err := ctls.checkURLs(urls...); err != nil {
				return err
			}
			if concurrency < 1 || concurrency > 49 {
				return errors.New("--concurrency must be between 1 and 49 (one port of the test band each)")
			}
			res, err := runBench(cmd.Context(), cmd.ErrOrStderr(), benchSpec{op: op, urls: urls, token: token, duration: duration, concurrency: concurrency, tls: ctls})
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d ops in %.1fs with %d clients = %.0f ops/s; latency p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d errors\n",
				res.Op, res.Ops, res.Seconds, res.Concurrency, res.OpsPerSec, res.P50Ms, res.P99Ms, res.MaxMs, res.Errors)
			return nil
		},
	}
	cmd.Flags().StringVar(&candidates, "candidates", "http://127.0.0.1:31413,http://127.0.0.1:31423,http://127.0.0.1:31433", "comma-separated candidate URLs")
	cmd.Flags().StringVar(&op, "op", "renew", "operation: renew, register or acquire")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long to run")
	cmd.Flags().IntVar(&concurrency, "concurrency", 16, "concurrent clients")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	bindCAFile(cmd, &caFile)
	return cmd
}

type benchSpec struct {
	op, token   string
	urls        []string
	duration    time.Duration
	concurrency int
	tls         clientTLS // a CA (and certificate) for an HTTPS cluster
}

// benchSetupTimeout bounds the clients' setup before the measured loop.
const benchSetupTimeout = 30 * time.Second

func runBench(ctx context.Context, progress io.Writer, spec benchSpec) (benchResult, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	if spec.tls.ca != nil {
		pool, err := member.ParseCA(spec.tls.ca)
		if err != nil {
			return benchResult{}, err
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if spec.tls.cert != nil {
			transport.TLSClientConfig.Certificates = []tls.Certificate{*spec.tls.cert}
		}
	}
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: transport}
	var mu sync.Mutex
	var lat []time.Duration
	errCount := 0
	// Every client sets up (a lease to renew, a resource to heartbeat)
	// before the clock starts: the duration is the measured loop's alone.
	setupCtx, cancelSetup := context.WithTimeout(ctx, benchSetupTimeout)
	defer cancelSetup()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ready sync.WaitGroup
	ready.Add(spec.concurrency)
	started := make(chan struct{})
	var start time.Time
	var wg sync.WaitGroup
	var setupErr error
	for w := 0; w < spec.concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client, err := member.NewClient(member.ClientConfig{URL: spec.urls[w%len(spec.urls)], Token: spec.token, HTTPClient: httpc})
			var step func() error
			cleanup := func() {}
			if err == nil {
				step, cleanup, err = benchStep(client, spec.op, w)
			}
			ready.Done()
			if err != nil {
				mu.Lock()
				setupErr = err
				mu.Unlock()
				cancel()
				return
			}
			defer cleanup()
			select {
			case <-started:
			case <-ctx.Done():
				return
			}
			for ctx.Err() == nil {
				t0 := time.Now()
				err := step()
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					errCount++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}(w)
	}
	ready.Wait()
	if setupCtx.Err() != nil {
		cancel()
	}
	start = time.Now()
	time.AfterFunc(spec.duration, cancel)
	close(started)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
			mu.Lock()
			fmt.Fprintf(progress, "bench %s: %5.1fs %d ops, %d errors\n", spec.op, time.Since(start).Seconds(), len(lat), errCount)
			mu.Unlock()
		}
	}
	if setupErr != nil {
		return benchResult{}, setupErr
	}
	elapsed := time.Since(start).Seconds()
	res := benchResult{Op: spec.op, Concurrency: spec.concurrency, Seconds: elapsed, Ops: len(lat), Errors: errCount}
	if len(lat) > 0 {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		res.OpsPerSec = float64(len(lat)) / elapsed
		res.P50Ms, res.P99Ms, res.MaxMs = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1])
	}
	return res, nil
}

// benchStep prepares one client's loop body and the cleanup that undoes it.
// A step runs to completion on its own deadline, never cut by the end of the
// run: a write cancelled in flight could be applied with its answer lost,
// leaving a lease behind.
//
// Each client leases and registers for a machine of its own, bench-<w>: the
// cluster limits the live leases of one machine (a quarter of the band), and
// a run's clients must not share that limit.
func benchStep(c *member.Client, op string, w int) (step func() error, cleanup func(), err error) {
	bg := context.Background()
	ctx := bg
	machine := fmt.Sprintf("bench-%d", w)
	acquire := func() (wire.PortLease, error) {
		return c.AcquirePortLease(ctx, wire.AcquireRequest{Machine: machine, Purpose: "bench", TTLMs: 60_000}, "")
	}
	switch op {
	case "renew":
		l, err := acquire()
		if err != nil {
			return nil, nil, fmt.Errorf("acquire a lease to renew: %w", err)
		}
		return func() error {
				_, err := c.RenewPortLease(ctx, l.Port, l.LeaseID)
				return err
			}, func() {
				_ = c.ReleasePortLease(bg, l.Port, l.LeaseID)
			}, nil
	case "acquire":
		return func() error {
			l, err := acquire()
			if err != nil {
				return err
			}
			return c.ReleasePortLease(bg, l.Port, l.LeaseID)
		}, func() {}, nil
	case "register":
		id := "instance:" + machine + "/bench"
		reg := wire.RegisterRequest{ID: id, Kind: "instance", Name: id, Machine: machine, Endpoint: "http://bench", TTLMs: 60_000}
		if _, err := c.Register(ctx, reg); err != nil {
			return nil, nil, fmt.Errorf("register a resource: %w", err)
		}
		return func() error {
				_, err := c.HeartbeatResource(ctx, id, nil)
				return err
			}, func() {
				_ = c.DeleteResource(bg, id)
			}, nil
	}
	return nil, nil, fmt.Errorf("unknown --op %q: want renew, register or acquire", op)
}
