package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
)

func newHealthCmd() *cobra.Command {
	var (
		url, caFile string
		ready       bool
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health [--ready] [--url URL]",
		Short: "Exit 0 if this node's API answers /v1/health (or /v1/ready), 1 if not: for healthchecks",
		Long: `Ask this node's API whether it is healthy: GET /v1/health, or /v1/ready with
--ready (a leader is known and its claim applied here). Exit status 0 on 200,
1 otherwise, with the reason on stderr. No token is needed.

The node is --url, else http://<http.addr> from the configuration (--config,
ELANOUS_HTTP_ADDR), with an unspecified host (0.0.0.0, ::) replaced by
loopback — https:// when the configuration has tls.*, verified against the
CA (--ca-file, ELANOUS_CA_FILE or tls.ca_file) as the certificate of
node.id, whatever address it is reached at. A FROM scratch image has no curl: deploy/Dockerfile's HEALTHCHECK
runs "elanous-node health --ready".`,
		Example: `  elanous-node health --config /etc/elanous/elanous.yaml --ready
  elanous-node health --url http://10.0.0.1:31413`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, ctls, err := loadConfigTLS(cmd, loadCommandConfig, caFile)
			if err != nil {
				return err
			}
			base, serverName := url, ""
			if base == "" {
				scheme := "http://"
				if cfg.TLS.Enabled() {
					// This node's own certificate names node.id, not
					// necessarily the loopback address dialled.
					scheme, serverName = "https://", cfg.Node.ID
				}
				base = scheme + loopbackAddr(cfg.HTTP.Addr)
			}
			transport := &http.Transport{Proxy: nil}
			if ctls.ca != nil {
				pool, err := member.ParseCA(ctls.ca)
				if err != nil {
					return err
				}
				transport.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
				if ctls.cert != nil {
					transport.TLSClientConfig.Certificates = []tls.Certificate{*ctls.cert}
				}
			}
			path := "/v1/health"
			if ready {
				path = "/v1/ready"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			target := strings.TrimSuffix(base, "/") + path
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
			resp, err := (&http.Client{Transport: transport}).Do(req)
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s %s", target, resp.Status, strings.TrimSpace(string(body)))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&url, "url", "", "the node's API origin (default: http://<http.addr> from the configuration)")
	fs.BoolVar(&ready, "ready", false, "check /v1/ready instead of /v1/health")
	fs.DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	bindCAFile(cmd, &caFile)
	return cmd
}

// loopbackAddr turns a listen address into one to dial on this host: an
// unspecified host (empty, 0.0.0.0, ::) becomes 127.0.0.1 or ::1.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.Equal(net.IPv4zero)):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
