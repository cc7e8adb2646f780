package main

import (
	"github.com/spf13/cobra"
)

// newGroup completes a command that only gathers subcommands: cmd states its
// Use, Short and any Long and Example, and subs are added to it.
func newGroup(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	return cmd
}

// clientCmd is a client command that makes its call, then prints the result.
type clientCmd[T any] struct {
	// cmd states the command's Use, Short, Long, Example and Args (and
	// DisableFlagsInUseLine); newClientCmd adds RunE and the flags.
	cmd *cobra.Command
	// jsonHelp is the help of --json, which prints the result as one line
	// of JSON instead of by text; "" for a command without --json.
	jsonHelp string
	// run makes the call with the client flags (see clientFlags.bind).
	run func(cmd *cobra.Command, args []string, flags *clientFlags) (T, error)
	// text prints the result without --json; nil prints nothing.
	text func(cmd *cobra.Command, args []string, v T) error
}

// newClientCmd completes c.cmd with the client flags, --json when
// c.jsonHelp is set, and a RunE that runs c.run and prints its result (on
// stdout as JSON with --json, else by c.text); when c.run fails it prints
// nothing and returns the error.
func newClientCmd[T any](c clientCmd[T]) *cobra.Command {
	var (
		flags  clientFlags
		asJSON bool
	)
	cmd := c.cmd
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		v, err := c.run(cmd, args, &flags)
		switch {
		case err != nil:
			return err
		case asJSON:
			return writeJSON(cmd.OutOrStdout(), v)
		case c.text == nil:
			return nil
		}
		return c.text(cmd, args, v)
	}
	flags.bind(cmd)
	if c.jsonHelp != "" {
		cmd.Flags().BoolVar(&asJSON, "json", false, c.jsonHelp)
	}
	return cmd
}
