package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newJoinCmd() *cobra.Command {
	var (
		rawURL, tokenFile, machine, caFile string
		offline                            bool
	)
	cmd := &cobra.Command{
		Use:   "join --url URL --token-file F [--machine M] [--data-dir DIR]",
		Short: "Write the join file a member machine uses to reach the cluster",
		Long: `Write <data-dir>/control/join.json: the candidate URL this machine joins
through and its credentials, read from --token-file — either a bare machine
token ("elanous-node token issue --machine M" on an admin machine) or a
tokens.json. Only the tokens given are written (scopes are never widened);
the file is written atomically with mode 0600. A member sends these tokens
only to that URL; other candidates forward to the leader.

With TLS, give the cluster CA (--ca-file, ELANOUS_CA_FILE or tls.ca_file):
it is written into the join file ("ca"), so the member verifies every
candidate against it with nothing else to configure, and the URL must be
https://.

Before writing, the URL is checked: it must answer GET /v1/primary and
accept the token (skip with --offline).`,
		Example: `  # on the admin machine
  elanous-node token issue --machine mbp > mbp.token
  # on mbp (mode 0600 file)
  elanous-node join --url https://10.0.0.1:31413 --ca-file ca.pem --token-file mbp.token --machine mbp
  elanous-node member run --config /etc/elanous/elanous.yaml`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			origin, err := wire.ParseOrigin(rawURL)
			if err != nil {
				return fmt.Errorf("--url: %w", err)
			}
			tf, err := member.ReadTokenFile(tokenFile)
			if err != nil {
				return err
			}
			cfg, ctls, err := loadConfigTLS(cmd, loadClientConfig, caFile)
			if err != nil {
				return err
			}
			if err := ctls.checkURLs(origin); err != nil {
				return fmt.Errorf("--url: %w", err)
			}
			progress := cmd.ErrOrStderr()
			j := member.Join{URL: origin, CA: ctls.ca}
			switch {
			case tf.Bare != "":
				if machine == "" {
					host, _ := os.Hostname()
					if !wire.ValidMachine(host) {
						return errors.New("--machine is required (the hostname is not a valid machine name)")
					}
					machine = host
					fmt.Fprintf(progress, "machine: %s (the hostname; pass --machine to choose)\n", machine)
				}
				if !wire.ValidMachine(machine) {
					return fmt.Errorf("--machine %q is not a valid machine name", machine)
				}
				j.Machine, j.Tokens = machine, member.Tokens{member.ScopeMember: tf.Bare}
			case machine != "":
				return errors.New("--machine goes with a bare machine token; a tokens.json carries scoped cluster tokens")
			default:
				j.Tokens = tf.Tokens
			}
			if !offline {
				if err := checkJoin(cmd, j, ctls); err != nil {
					return err
				}
			}
			if err := member.WriteJoinFile(cfg.Node.DataDir, j); err != nil {
				return err
			}
			if j.CA != nil {
				fmt.Fprintf(progress, "the join file carries the CA from %s\n", ctls.from)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (mode 0600): joined %s\n", member.JoinPath(cfg.Node.DataDir), origin)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&rawURL, "url", "", "candidate URL to join through, e.g. https://10.0.0.1:31413 (required)")
	fs.StringVar(&tokenFile, "token-file", "", "file holding a bare machine token or a tokens.json, mode 0600 (required)")
	fs.StringVar(&machine, "machine", "", "machine the token was issued for (default: the hostname)")
	fs.BoolVar(&offline, "offline", false, "write the file without contacting the cluster")
	bindCAFile(cmd, &caFile)
	bindDataDir(cmd)
	_ = cmd.MarkFlagRequired("url")
	_ = cmd.MarkFlagRequired("token-file")
	return cmd
}

// checkJoin asks the URL for the primary (no token), then makes one
// authenticated read to see that the token is known, printing progress.
func checkJoin(cmd *cobra.Command, j member.Join, ctls clientTLS) error {
	progress := cmd.ErrOrStderr()
	ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
	defer cancel()
	fmt.Fprintf(progress, "checking %s ...\n", j.URL)
	var tok string
	for _, s := range []member.Scope{member.ScopeQuery, member.ScopeMember, member.ScopeAdmin} {
		if t, ok := j.Tokens[s]; ok {
			tok = t
			break
		}
	}
	httpc, err := ctls.httpClient()
	if err != nil {
		return err
	}
	c, err := member.NewClient(member.ClientConfig{URL: j.URL, Token: tok, HTTPClient: httpc})
	if err != nil {
		return err
	}
	p, err := c.Primary(ctx)
	if err != nil {
		hint := "use --offline to write the file anyway"
		if ctls.ca == nil && strings.HasPrefix(j.URL, "https://") {
			hint = "pass the cluster CA with --ca-file, or use --offline to write the file anyway"
		}
		return fmt.Errorf("join %s: %w (%s)", j.URL, err, hint)
	}
	if p.Known {
		fmt.Fprintf(progress, "reachable; primary %s (generation %d)\n", p.Holder, p.Generation)
	} else {
		fmt.Fprintln(progress, "reachable; no primary known right now")
	}
	_, err = c.ListResources(ctx, member.ResourceFilter{Machine: j.Machine})
	switch {
	case err == nil, member.StatusCode(err) == http.StatusForbidden:
		// A 403 still means the token is known, only without this right.
	case member.StatusCode(err) == http.StatusUnauthorized:
		return fmt.Errorf("join %s: the cluster does not accept this token (revoked, or for another cluster)", j.URL)
	default:
		return fmt.Errorf("join %s: check the token: %w", j.URL, err)
	}
	fmt.Fprintln(progress, "token accepted")
	return nil
}
