package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/member"
)

// caFileEnv names the cluster CA for client commands, like --ca-file.
const caFileEnv = "ELANOUS_CA_FILE"

// caFileUsage is the help of --ca-file.
const caFileUsage = "PEM file of the cluster CA; servers are verified against it and only https:// candidates are used " +
	"(default: " + caFileEnv + ", else tls.ca_file of the config, else the join file's CA)"

// bindCAFile defines --ca-file on cmd.
func bindCAFile(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "ca-file", "", caFileUsage)
}

// clientTLS is the TLS a client command uses, and where it came from.
type clientTLS struct {
	ca   []byte // PEM; nil means plaintext
	from string
	cert *tls.Certificate
}

// loadConfigTLS loads cmd's configuration with load (loadCommandConfig or
// loadClientConfig), then the TLS of a command that has no join file to
// consult: loadClientTLS with caFile, the command's --ca-file.
func loadConfigTLS(cmd *cobra.Command, load func(*cobra.Command) (config.Config, error), caFile string) (config.Config, clientTLS, error) {
	cfg, err := load(cmd)
	if err != nil {
		return config.Config{}, clientTLS{}, err
	}
	ctls, err := loadClientTLS(caFile, cfg, nil)
	return cfg, ctls, err
}

// loadClientTLS finds the cluster CA, in order: --ca-file, ELANOUS_CA_FILE,
// tls.ca_file of the configuration (file or ELANOUS_TLS_CA_FILE), the join
// file's "ca". With a CA, tls.cert_file and tls.key_file of the
// configuration, when set, are the certificate presented to an API that
// requires one (tls.verify_incoming_api).
func loadClientTLS(flag string, cfg config.Config, join *member.Join) (clientTLS, error) {
	var out clientTLS
	path := ""
	switch {
	case flag != "":
		path, out.from = flag, "--ca-file "+flag
	case os.Getenv(caFileEnv) != "":
		path = os.Getenv(caFileEnv)
		out.from = caFileEnv + "=" + path
	case cfg.TLS.CAFile != "":
		path, out.from = cfg.TLS.CAFile, "tls.ca_file "+cfg.TLS.CAFile
	case join != nil && join.CA != nil:
		out.ca, out.from = join.CA, "the join file's CA"
	default:
		return out, nil
	}
	if path != "" {
		data, err := os.ReadFile(path) //nolint:gosec // G703: the operator names the CA file (flag, environment or config)
		if err != nil {
			return out, fmt.Errorf("read the CA file: %w", err)
		}
		if _, err := member.ParseCA(data); err != nil {
			return out, fmt.Errorf("CA file %s: %w", path, err)
		}
		out.ca = data
	}
	if cfg.TLS.CertFile != "" || cfg.TLS.KeyFile != "" {
		kp, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return out, fmt.Errorf("client certificate (tls.cert_file, tls.key_file): %w", err)
		}
		out.cert = &kp
	}
	return out, nil
}

// httpClient returns the client of the command: verifying against the CA
// (https only) when there is one.
func (c clientTLS) httpClient() (*http.Client, error) {
	return member.NewHTTPClient(member.HTTPOptions{CA: c.ca, Certificate: c.cert})
}

// checkURLs refuses http:// addresses when a CA is in use: no token may go
// where no certificate is verified.
func (c clientTLS) checkURLs(urls ...string) error {
	if c.ca == nil {
		return nil
	}
	for _, u := range urls {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(u)), "http://") {
			return fmt.Errorf("%s is plaintext http but a CA is configured (%s): use the candidates' https:// URLs", u, c.from)
		}
	}
	return nil
}
