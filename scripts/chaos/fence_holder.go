package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// fenceHolderCmd is the first argument that runs this program as the fences
// scenario's lease holder instead of the suite.
const fenceHolderCmd = "fence-holder"

// fenceTokenEnv carries the holder's machine token (never a flag).
const fenceTokenEnv = "CHAOS_FENCE_TOKEN" //nolint:gosec // G101: the variable's name, not a credential

// holderEvent is one JSON line a holder prints: "acquired" (with the
// lease's port, fence and lease id), "write" (seq and the store's status),
// "lost" (a renewal was refused) or "failed".
type holderEvent struct {
	Event   string `json:"event"`
	Port    int    `json:"port,omitempty"`
	Fence   uint64 `json:"fence,omitempty"`
	LeaseID string `json:"leaseId,omitempty"`
	Seq     int    `json:"seq,omitempty"`
	Status  int    `json:"status,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// fenceWrite is a holder's request to the downstream store: its fence for
// the port, and whether the write is a dangerous one the store confirms
// with the cluster first.
type fenceWrite struct {
	Holder    string `json:"holder"`
	Port      int    `json:"port"`
	Fence     uint64 `json:"fence"`
	Seq       int    `json:"seq"`
	Dangerous bool   `json:"dangerous"`
}

// fenceHTTPClient is the HTTP client of the scenario's cluster clients: a
// short timeout, and the cluster CA when caFile is set.
func fenceHTTPClient(caFile string, tlsConfig *tls.Config) (*http.Client, error) {
	if caFile != "" && tlsConfig == nil {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", caFile)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}

// anyNode is one member client per node: a call goes to the nodes in turn
// until one answers with something other than unreachable or 503.
type anyNode []*member.Client

func newAnyNode(urls []string, token string, httpc *http.Client) (anyNode, error) {
	var out anyNode
	for _, u := range urls {
		c, err := member.NewClient(member.ClientConfig{URL: u, Token: token, HTTPClient: httpc})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (a anyNode) do(ctx context.Context, call func(*member.Client) error) error {
	var err error
	for _, c := range a {
		if err = call(c); err == nil || !member.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// CheckFence makes anyNode a member.FenceChecker.
func (a anyNode) CheckFence(ctx context.Context, port int, fence uint64) (wire.FenceCheck, error) {
	var out wire.FenceCheck
	err := a.do(ctx, func(c *member.Client) (err error) {
		out, err = c.CheckFence(ctx, port, fence)
		return err
	})
	return out, err
}

// fenceHolder runs one lease holder of the fences scenario: it acquires
// --port (every other port of the band excluded) under its machine token,
// then every 100 ms sends a fenced write to the store and renews the lease
// every quarter of its TTL. Run as a process of its own so the scenario can
// SIGSTOP it. A woken holder writes on with its old fence even once a
// renewal was refused, as a client that has not noticed it lost the lease
// would. It releases the lease on SIGTERM.
func fenceHolder(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet(fenceHolderCmd, flag.ContinueOnError)
	targets := fs.String("targets", "", "comma-separated node URLs")
	machine := fs.String("machine", "", "the machine of the holder's token")
	port := fs.Int("port", 0, "the port to hold")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL")
	store := fs.String("store", "", "the downstream store's URL")
	caFile := fs.String("ca-file", "", "cluster CA (TLS clusters)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	emit := func(ev holderEvent) { _ = out.Encode(ev) }
	httpc, err := fenceHTTPClient(*caFile, nil)
	if err != nil {
		emit(holderEvent{Event: "failed", Detail: err.Error()})
		return 2
	}
	nodes, err := newAnyNode(strings.Split(*targets, ","), os.Getenv(fenceTokenEnv), httpc)
	if err != nil {
		emit(holderEvent{Event: "failed", Detail: err.Error()})
		return 2
	}
	var excluded []int
	for p := wire.DefaultBandStart; p <= wire.DefaultBandEnd; p++ {
		if p != *port {
			excluded = append(excluded, p)
		}
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := wire.AcquireRequest{Machine: *machine, Purpose: "chaos-fence", TTLMs: ttl.Milliseconds(), Excluded: excluded}
	var lease wire.PortLease
	for deadline := time.Now().Add(15 * time.Second); ; {
		err = nodes.do(ctx, func(c *member.Client) (err error) {
			lease, err = c.AcquirePortLease(ctx, req, hex.EncodeToString(key[:]))
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			emit(holderEvent{Event: "failed", Detail: "acquire: " + err.Error()})
			return 1
		}
		time.Sleep(100 * time.Millisecond) // the port is busy or no leader: try again
	}
	emit(holderEvent{Event: "acquired", Port: lease.Port, Fence: lease.Fence, LeaseID: lease.LeaseID})

	storeClient := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	renewed, lost := time.Now(), false
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = nodes.do(rctx, func(c *member.Client) error { return c.ReleasePortLease(rctx, lease.Port, lease.LeaseID) })
			cancel()
			return 0
		case <-tick.C:
		}
		status := sendWrite(ctx, storeClient, *store, fenceWrite{Holder: *machine, Port: lease.Port, Fence: lease.Fence, Seq: seq, Dangerous: seq%3 == 0})
		emit(holderEvent{Event: "write", Seq: seq, Status: status})
		if lost || time.Since(renewed) < *ttl/4 {
			continue
		}
		err := nodes.do(ctx, func(c *member.Client) error {
			_, err := c.RenewPortLease(ctx, lease.Port, lease.LeaseID)
			return err
		})
		switch {
		case err == nil:
			renewed = time.Now()
		case !member.IsRetryable(err) && !errors.Is(err, context.Canceled) && !lost:
			// It goes on writing, as a holder that has not looked at its
			// renewals would: the store must refuse every write.
			lost = true
			emit(holderEvent{Event: "lost", Detail: err.Error()})
		}
	}
}

// sendWrite posts w to the store and returns the status (0: no answer).
func sendWrite(ctx context.Context, c *http.Client, store string, w fenceWrite) int {
	body, _ := json.Marshal(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, store+"/write", strings.NewReader(string(body)))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
