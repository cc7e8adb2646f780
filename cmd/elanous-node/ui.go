package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/api/console"
	"github.com/elanous/elanous-node/member"
)

func newUICmd() *cobra.Command {
	var (
		view  string
		admin bool
	)
	cmd := newClientCmd(clientCmd[string]{
		cmd: &cobra.Command{
			Use:   "ui [--candidates URLS] [--view VIEW] [--admin]",
			Short: "Print the web console's URL on a candidate, with the token in its fragment",
			Long: `Print the URL of the web console (/ui/, served by every candidate) on the
candidate that holds the primary (the first candidate when none answers), with
the token in the URL's fragment: /ui/<view>#token=<token>, like
"nomad ui -authenticate". Open it in a browser: the page moves the token into
the tab's session storage and removes it from the address bar. A fragment is
never sent to a server, so the token reaches no log; it does stay in your
shell's output and the browser's history of typed URLs, so treat the line
like the token itself.

The token is found as every client command finds it (ELANOUS_TOKEN, else
--token-file, else the join file): the query token by default, the admin
token with --admin (the Tokens view needs it). With no token for the chosen
candidate the URL is printed without a fragment and the console asks for one.

Views: cluster (the default), fleet, ports, tokens, timeline.`,
			Example: `  ELANOUS_TOKEN=<query token> elanous-node ui --candidates http://127.0.0.1:31413,http://127.0.0.1:31423
  elanous-node ui --token-file /var/lib/elanous/control/tokens.json --admin --view tokens
  xdg-open "$(elanous-node ui --view fleet)"`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (string, error) {
			if !slices.Contains(console.Views, view) {
				return "", fmt.Errorf("--view %q: want one of %s", view, strings.Join(console.Views, ", "))
			}
			scope := member.ScopeQuery
			if admin {
				scope = member.ScopeAdmin
			}
			env, err := flags.env(cmd, scope)
			if err != nil {
				return "", err
			}
			r, err := env.resolver()
			if err != nil {
				return "", err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			addr, err := r.Resolve(ctx)
			if err != nil {
				return "", err
			}
			if addr.Token == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: no token may be sent to %s; the console will ask for one\n", addr.URL)
			}
			return consoleURL(addr.URL, view, addr.Token), nil
		},
		text: func(cmd *cobra.Command, _ []string, url string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), url)
			return err
		},
	})
	cmd.Flags().StringVar(&view, "view", "cluster", "the view to open: "+strings.Join(console.Views, ", "))
	cmd.Flags().BoolVar(&admin, "admin", false, "carry the admin token instead of the query token (the Tokens view needs it)")
	return cmd
}

// consoleURL is the console's view on the candidate at origin, with token
// in the fragment when there is one.
func consoleURL(origin, view, token string) string {
	u := strings.TrimRight(origin, "/") + console.Prefix + view
	if token != "" {
		u += "#token=" + token
	}
	return u
}
