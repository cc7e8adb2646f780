package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/wire"
)

// devCandidates are the fixed loopback addresses of the dev cluster.
var devNames = []string{"node-a", "node-b", "node-c"}

// devConfigs returns the configuration of the three dev candidates; with
// tlsDir set they use the CA and certificates devTLS wrote there.
func devConfigs(dataDir string, basePort int, tlsDir string) []config.Config {
	scheme := "http"
	if tlsDir != "" {
		scheme = "https"
	}
	var cands []config.Candidate
	for i, name := range devNames {
		cands = append(cands, config.Candidate{
			Machine: name,
			URL:     fmt.Sprintf("%s://127.0.0.1:%d", scheme, basePort+10*i),
			Raft:    fmt.Sprintf("127.0.0.1:%d", basePort-1+10*i),
		})
	}
	var out []config.Config
	for i, name := range devNames {
		cfg := config.Default()
		cfg.Node.ID = name
		cfg.Node.DataDir = filepath.Join(dataDir, name)
		cfg.HTTP.Addr = strings.TrimPrefix(cands[i].URL, scheme+"://")
		cfg.HTTP.Advertise = cands[i].URL
		cfg.Raft.Addr = cands[i].Raft
		cfg.Raft.Advertise = cands[i].Raft
		cfg.Cluster.Candidates = cands
		cfg.Cluster.Bootstrap = true
		cfg.Tokens.File = filepath.Join(dataDir, "control", "tokens.json")
		// No write rate limits: every client of a dev cluster is on
		// 127.0.0.1, and bench should measure the cluster, not the limiter.
		cfg.Limits.WriteRate = 0
		if tlsDir != "" {
			cfg.TLS.CAFile = filepath.Join(tlsDir, caCertName)
			cfg.TLS.CertFile = filepath.Join(tlsDir, name+".pem")
			cfg.TLS.KeyFile = filepath.Join(tlsDir, name+"-key.pem")
		}
		out = append(out, cfg)
	}
	return out
}

func newDevCmd() *cobra.Command {
	var dataDir, logLevel string
	var basePort int
	var withTLS bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run three candidates in one process on 127.0.0.1 for development",
		Long: `Run a whole three-candidate cluster in this process, on loopback:

  node-a  http://127.0.0.1:31413  raft 127.0.0.1:31412
  node-b  http://127.0.0.1:31423  raft 127.0.0.1:31422
  node-c  http://127.0.0.1:31433  raft 127.0.0.1:31432

Data lives in a temporary directory removed on exit, unless --data-dir is
given (then the cluster and its tokens survive restarts). The cluster tokens
are printed once the cluster is ready, with the candidate list to give
members. Stop it with Ctrl-C.

With --tls the candidates run as a real cluster would with TLS: a CA and a
certificate per candidate (for 127.0.0.1 and localhost) are made in
<data dir>/tls (kept and reused with --data-dir), the API is HTTPS and Raft
is mutual TLS. Give clients <data dir>/tls/ca.pem (--ca-file).

Every client of a dev cluster comes from 127.0.0.1, so it runs without the
write rate limits (limits.write_rate 0); the other limits keep their defaults.`,
		Example: `  go run ./cmd/elanous-node dev
  elanous-node dev --data-dir ./dev-data
  curl -s http://127.0.0.1:31413/v1/primary
  elanous-node dev --tls --data-dir ./dev-tls
  curl -s --cacert ./dev-tls/tls/ca.pem https://127.0.0.1:31413/v1/primary`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			dir := dataDir
			if dir == "" {
				tmp, err := os.MkdirTemp("", "elanous-dev-")
				if err != nil {
					return fmt.Errorf("create dev data dir: %w", err)
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			}
			tlsDir := ""
			if withTLS {
				tlsDir = filepath.Join(dir, "tls")
				if err := devTLS(tlsDir); err != nil {
					return err
				}
			}
			cfgs := devConfigs(dir, basePort, tlsDir)
			tokens, err := devTokens(cfgs[0].TokensFile())
			if err != nil {
				return err
			}
			logOut := cmd.ErrOrStderr()
			cfgs[0].Log.Level = logLevel
			logger := newLogger(cfgs[0], logOut)
			fmt.Fprintf(out, "starting 3 candidates, data in %s\n", dir)
			var running []*candidate
			stopAll := func() {
				fmt.Fprintln(out, "stopping candidates")
				for _, c := range running {
					_ = c.stop(5 * time.Second)
				}
			}
			for _, cfg := range cfgs {
				cfg.Log.Level = logLevel
				if err := cfg.Validate(); err != nil {
					stopAll()
					return fmt.Errorf("dev configuration of %s: %w", cfg.Node.ID, err)
				}
				c, err := startCandidate(cfg, tokens, logger)
				if err != nil {
					stopAll()
					return err
				}
				running = append(running, c)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			for _, c := range running {
				if err := c.waitReady(ctx); err != nil {
					stopAll()
					return err
				}
			}
			printDevSummary(out, running, tokens)
			<-cmd.Context().Done()
			stopAll()
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the cluster's data here (default: a temporary directory removed on exit)")
	cmd.Flags().IntVar(&basePort, "http-port", 31413, "HTTP port of node-a; node-b and node-c use +10 and +20, Raft ports are one below each")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level of the candidates: debug, info, warn or error")
	cmd.Flags().BoolVar(&withTLS, "tls", false, "run with TLS: HTTPS API and mutual TLS Raft, with a CA made in <data dir>/tls")
	return cmd
}

// devTLS makes, in dir, a CA and a certificate for each dev candidate (for
// 127.0.0.1 and localhost), keeping the files already there.
func devTLS(dir string) error {
	ca, err := readCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = certs.NewCA(time.Now(), 0); err == nil {
			err = writePair(filepath.Join(dir, caCertName), filepath.Join(dir, caKeyName), ca, false)
		}
	}
	if err != nil {
		return fmt.Errorf("dev CA in %s: %w", dir, err)
	}
	for _, name := range devNames {
		certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if _, err := os.Stat(certPath); err == nil {
			continue
		}
		pair, err := certs.NewCert(ca, certs.CertRequest{Machine: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNS: []string{"localhost"}}, time.Now())
		if err != nil {
			return err
		}
		if err := writePair(certPath, keyPath, pair, true); err != nil {
			return err
		}
	}
	return nil
}

// devTokens reads the dev cluster's tokens file, creating it on first use.
func devTokens(path string) (wire.TokensFile, error) {
	t, err := readTokensFile(path)
	if err == nil {
		return t, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return wire.TokensFile{}, err
	}
	if t, err = newTokens(); err != nil {
		return wire.TokensFile{}, err
	}
	if err := writeTokensFile(path, t); err != nil {
		return wire.TokensFile{}, err
	}
	return t, nil
}

func printDevSummary(out io.Writer, running []*candidate, tokens wire.TokensFile) {
	leader := ""
	var gen uint64
	for _, c := range running {
		if c.node.IsLeader() {
			leader, gen = c.cfg.Node.ID, c.node.FSM().Primary().Generation
		}
	}
	var urls []string
	fmt.Fprintln(out, "\ncandidates:")
	for _, c := range running {
		self, _ := c.cfg.Self()
		urls = append(urls, self.URL)
		fmt.Fprintf(out, "  %-7s %-24s raft %s\n", self.Machine, self.URL, self.Raft)
	}
	fmt.Fprintf(out, "\nprimary: %s (generation %d)\n", leader, gen)
	fmt.Fprintf(out, "\ntokens (also in %s, mode 0600):\n", running[0].cfg.TokensFile())
	fmt.Fprintf(out, "  admin   %s\n  member  %s\n  query   %s\n", tokens.Admin, tokens.Member, tokens.Query)
	curl, caFlag := "curl -s", ""
	if ca := running[0].cfg.TLS.CAFile; ca != "" {
		fmt.Fprintf(out, "\nTLS: CA %s (HTTPS API, mutual TLS Raft)\n", ca)
		curl, caFlag = "curl -s --cacert "+ca, " --ca-file "+ca
	}
	fmt.Fprintf(out, "\nconsole (the token moves from the link into the tab):\n  %s\n  admin, for the Tokens view: %s\n",
		consoleURL(urls[0], "cluster", tokens.Query), consoleURL(urls[0], "tokens", tokens.Admin))
	fmt.Fprintf(out, "\ntry:\n  %s %s/v1/primary\n  ELANOUS_TOKEN=%s elanous-node status --candidates %s%s\n\nready; Ctrl-C stops the cluster\n",
		curl, urls[0], tokens.Query, strings.Join(urls, ","), caFlag)
}
