package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// Client commands (status, token, lease, resources, member, join, bench)
// share the way they find the cluster and their credentials:
//   - candidates: --candidates, else cluster.candidates of the configuration
//     (--config or ELANOUS_CLUSTER_CANDIDATES), else the candidates the join
//     file learned from the cluster, else the join file's URL;
//   - token: ELANOUS_TOKEN, else --token-file, else the join file — never a
//     plain flag, so no token shows up in ps or shell history. A token from
//     the environment or a token file goes to the candidates listed; a token
//     from the join file only to the address it was joined for;
//   - CA: --ca-file, else ELANOUS_CA_FILE, else tls.ca_file, else the join
//     file's CA; with one, every server is verified against it before a
//     request (or a token) is sent, and http:// candidates are refused.

// tokenEnv is the environment variable client commands read their token from.
const tokenEnv = "ELANOUS_TOKEN" //nolint:gosec // G101: the variable's name, not a credential

// commandTimeout bounds a one-shot client command's requests.
const commandTimeout = 15 * time.Second

// clientFlags are the flags client commands share.
type clientFlags struct {
	candidates string
	tokenFile  string
	caFile     string
}

// bind defines --candidates, --token-file, --ca-file and --data-dir on cmd.
func (f *clientFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.candidates, "candidates", "",
		"comma-separated candidate URLs or machine=URL pairs (default: cluster.candidates from the config, else the join file's URL)")
	fs.StringVar(&f.tokenFile, "token-file", "",
		"file holding a bare token or a tokens.json, mode 0600 (used when "+tokenEnv+" is unset; default: the join file)")
	bindCAFile(cmd, &f.caFile)
	bindDataDir(cmd)
}

// bindDataDir defines --data-dir, which config.Load maps to node.data_dir.
func bindDataDir(cmd *cobra.Command) {
	cmd.Flags().String("data-dir", "",
		"member data directory holding control/join.json (config key node.data_dir, default /var/lib/elanous)")
}

// clientEnv is what a client command found: where the candidates are, the
// join file and the token to use.
type clientEnv struct {
	scope      member.Scope
	candidates []member.Candidate
	from       string // where the candidates came from, for messages
	dataDir    string
	join       *member.Join // nil when absent or unusable
	token      string       // from the environment or a token file; "" means the join file's
	tokenFrom  string
	tls        clientTLS
	logger     *slog.Logger
	httpc      *http.Client
}

// loadClientConfig loads the configuration a client command reads: the
// --config file, ELANOUS_* variables and --data-dir (node.data_dir).
func loadClientConfig(cmd *cobra.Command) (config.Config, error) {
	cfg, err := loadCommandConfig(cmd)
	if err != nil {
		return config.Config{}, fmt.Errorf("load configuration: %w", err)
	}
	return cfg, nil
}

// env gathers the candidates and credentials for a command needing scope.
// A join file that cannot be used (wrong mode, damaged) is an error when the
// command needs it, and a warning on stderr otherwise.
func (f *clientFlags) env(cmd *cobra.Command, scope member.Scope) (*clientEnv, error) {
	cfg, err := loadClientConfig(cmd)
	if err != nil {
		return nil, err
	}
	e := &clientEnv{scope: scope, dataDir: cfg.Node.DataDir,
		logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	join, joinErr := member.ReadJoinFile(e.dataDir)
	if joinErr == nil {
		e.join = join
	}
	if e.tls, err = loadClientTLS(f.caFile, cfg, e.join); err != nil {
		return nil, err
	}
	if e.httpc, err = e.tls.httpClient(); err != nil {
		return nil, err
	}

	switch {
	case strings.TrimSpace(f.candidates) != "":
		if e.candidates, err = parseCandidates(f.candidates); err != nil {
			return nil, err
		}
		e.from = "--candidates"
	case len(cfg.Cluster.Candidates) > 0:
		for _, c := range cfg.Cluster.Candidates {
			e.candidates = append(e.candidates, member.Candidate{Machine: c.Machine, URL: c.URL})
		}
		e.from = "the configuration"
	case joinErr != nil:
		return nil, fmt.Errorf("no candidates: no --candidates and no cluster.candidates in the configuration, and %w", joinErr)
	case e.join != nil && len(e.join.Candidates) > 0:
		// The list the member learned from the cluster (member run keeps it).
		for _, c := range e.join.Candidates {
			e.candidates = append(e.candidates, member.Candidate{Machine: c.Machine, URL: c.URL})
		}
		e.from = "the join file's candidates " + member.JoinPath(e.dataDir)
	case e.join != nil:
		e.candidates = []member.Candidate{{URL: e.join.URL}}
		e.from = "the join file " + member.JoinPath(e.dataDir)
	default:
		return nil, fmt.Errorf("no candidates: pass --candidates URL,URL, set cluster.candidates in the configuration (--config), " +
			"or run `elanous-node join` on this machine")
	}

	switch {
	case os.Getenv(tokenEnv) != "":
		tok := strings.TrimSpace(os.Getenv(tokenEnv))
		if !wire.ValidToken(tok) {
			return nil, fmt.Errorf("%s is set but is not a token (64 lowercase hex characters)", tokenEnv)
		}
		e.token, e.tokenFrom = tok, tokenEnv
	case f.tokenFile != "":
		tf, err := member.ReadTokenFile(f.tokenFile)
		if err != nil {
			return nil, err
		}
		tok, ok := tf.For(scope)
		if !ok {
			return nil, fmt.Errorf("token file %s holds no token of scope %s or wider", f.tokenFile, scope)
		}
		e.token, e.tokenFrom = tok, f.tokenFile
	case joinErr != nil:
		return nil, fmt.Errorf("no token: %s is unset, no --token-file, and %w", tokenEnv, joinErr)
	case e.join == nil:
		return nil, fmt.Errorf("no token: set %s, pass --token-file FILE, or run `elanous-node join` on this machine "+
			"(a token is never taken from a plain flag)", tokenEnv)
	default:
		e.tokenFrom = "the join file " + member.JoinPath(e.dataDir)
	}
	if joinErr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: ignoring the join file: %v\n", joinErr)
	}
	urls := make([]string, 0, len(e.candidates))
	for _, c := range e.candidates {
		urls = append(urls, c.URL)
	}
	if err := e.tls.checkURLs(urls...); err != nil {
		return nil, fmt.Errorf("candidates from %s: %w", e.from, err)
	}
	if e.token != "" {
		for i := range e.candidates {
			e.candidates[i].Tokens = member.Tokens{scope: e.token}
		}
	}
	return e, nil
}

// parseCandidates reads "URL,URL" or "machine=URL,machine=URL".
func parseCandidates(raw string) ([]member.Candidate, error) {
	var out []member.Candidate
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var c member.Candidate
		if name, u, ok := strings.Cut(item, "="); ok && !strings.Contains(name, "://") {
			c = member.Candidate{Machine: strings.TrimSpace(name), URL: strings.TrimSpace(u)}
		} else {
			c = member.Candidate{URL: item}
		}
		if _, err := wire.ParseOrigin(c.URL); err != nil {
			return nil, fmt.Errorf("--candidates: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("--candidates lists no candidate")
	}
	return out, nil
}

// resolver builds the resolver over the candidates for the env's scope.
func (e *clientEnv) resolver() (*member.Resolver, error) {
	r, err := member.NewResolver(member.ResolverConfig{
		Candidates: e.candidates, Join: e.join, Role: e.scope, HTTPClient: e.httpc, Logger: e.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("candidates from %s: %w", e.from, err)
	}
	return r, nil
}

// client builds a client that follows the primary.
func (e *clientEnv) client() (*member.Client, error) {
	r, err := e.resolver()
	if err != nil {
		return nil, err
	}
	return member.NewClient(member.ClientConfig{Resolver: r, HTTPClient: e.httpc})
}

// listReadHelp is the paragraph of --help that every list command shares.
const listReadHelp = `The list is a consistent read by default (?consistent=true), as etcdctl get
is: the leader answers (the candidate asked forwards to it), and the list holds
every write the cluster acknowledged before it. --stale reads the answering
candidate's own state instead: faster, and it answers without a leader, but it
may miss the latest writes made through other candidates.`

// bindStale adds --stale to a list command.
func bindStale(cmd *cobra.Command, stale *bool) {
	cmd.Flags().BoolVar(stale, "stale", false, "read the candidate's local state instead of a consistent read through the leader (faster; may lag)")
}

// untilAnswered runs an idempotent call until it is answered: while the
// server is unreachable or answers 503 (no leader, as during an election) it
// re-resolves the primary and tries again, every retryPause, until ctx ends.
func untilAnswered(ctx context.Context, c *member.Client, call func(context.Context) error) error {
	for {
		err := call(ctx)
		if err == nil || !member.IsRetryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryPause):
		}
		_, _ = c.Reresolve(ctx)
	}
}

// retryPause is the pause between two tries of untilAnswered.
const retryPause = 250 * time.Millisecond

// withRetry runs call and, when the server was unreachable or answered 503,
// re-resolves the primary and runs it once more — the member library's
// failover rule, for one-shot commands.
func withRetry(ctx context.Context, c *member.Client, call func(context.Context) error) error {
	err := call(ctx)
	if err != nil && ctx.Err() == nil && member.IsRetryable(err) {
		if _, rerr := c.Reresolve(ctx); rerr == nil {
			err = call(ctx)
		}
	}
	return err
}

// runCall is the one request of a client command: the client for scope from
// the command's flags, then call within commandTimeout under withRetry. An
// error building the client comes back as it is; an error from call comes
// back as "<what>: <error>" with explain's hint, its *member.APIError still
// in the chain for a command that words a status of its own.
func runCall[T any](cmd *cobra.Command, flags *clientFlags, scope member.Scope, what string,
	call func(context.Context, *member.Client) (T, error),
) (T, error) {
	var v T
	c, err := scopedClient(cmd, flags, scope)
	if err != nil {
		return v, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
	defer cancel()
	err = withRetry(ctx, c, func(ctx context.Context) (err error) {
		v, err = call(ctx, c)
		return err
	})
	if err != nil {
		return v, fmt.Errorf("%s: %w", what, explain(err, scope))
	}
	return v, nil
}

// explain adds a hint to common API errors.
func explain(err error, scope member.Scope) error {
	switch member.StatusCode(err) {
	case http.StatusUnauthorized:
		return fmt.Errorf("%w (the cluster does not know this token)", err)
	case http.StatusForbidden:
		return fmt.Errorf("%w (this token lacks the %s scope or the machine)", err, scope)
	}
	return err
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// msTime formats Unix milliseconds for tables.
func msTime(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// orDash prints "-" for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scopedClient builds the client of a command that needs nothing from its
// environment but a token of scope.
func scopedClient(cmd *cobra.Command, flags *clientFlags, scope member.Scope) (*member.Client, error) {
	env, err := flags.env(cmd, scope)
	if err != nil {
		return nil, err
	}
	return env.client()
}
