package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

func TestNewGroupAddsSubcommands(t *testing.T) {
	g := newGroup(&cobra.Command{Use: "g", Short: "a group"}, &cobra.Command{Use: "a"}, &cobra.Command{Use: "b"})
	var names []string
	for _, c := range g.Commands() {
		names = append(names, c.Name())
	}
	if fmt.Sprint(names) != "[a b]" || g.Short != "a group" || g.RunE != nil {
		t.Fatalf("group: subcommands %v, Short %q, RunE set %v", names, g.Short, g.RunE != nil)
	}
}

// runClientCmd runs a newClientCmd command whose call returns v and err.
func runClientCmd(t *testing.T, jsonHelp string, v map[string]int, callErr error, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := newClientCmd(clientCmd[map[string]int]{
		cmd:      &cobra.Command{Use: "c", Args: cobra.NoArgs, SilenceUsage: true, SilenceErrors: true},
		jsonHelp: jsonHelp,
		run: func(_ *cobra.Command, _ []string, flags *clientFlags) (map[string]int, error) {
			if flags == nil {
				t.Error("run got no client flags")
			}
			return v, callErr
		},
		text: func(cmd *cobra.Command, _ []string, v map[string]int) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "n=%d\n", v["n"])
			return err
		},
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), err
}

func TestNewClientCmdPrintsJSONOrText(t *testing.T) {
	if out, err := runClientCmd(t, "print JSON", map[string]int{"n": 2}, nil); err != nil || out != "n=2\n" {
		t.Fatalf("text: %q, %v", out, err)
	}
	if out, err := runClientCmd(t, "print JSON", map[string]int{"n": 2}, nil, "--json"); err != nil || out != "{\"n\":2}\n" {
		t.Fatalf("--json: %q, %v", out, err)
	}
	boom := errors.New("boom")
	if out, err := runClientCmd(t, "print JSON", map[string]int{"n": 2}, boom, "--json"); !errors.Is(err, boom) || out != "" {
		t.Fatalf("failed call: printed %q, error %v", out, err)
	}
	if _, err := runClientCmd(t, "", nil, nil, "--json"); err == nil {
		t.Fatal("--json accepted by a command without jsonHelp")
	}
}

func TestNewClientCmdBindsClientFlags(t *testing.T) {
	cmd := newClientCmd(clientCmd[struct{}]{
		cmd:      &cobra.Command{Use: "c"},
		jsonHelp: "print JSON",
		run:      func(*cobra.Command, []string, *clientFlags) (struct{}, error) { return struct{}{}, nil },
	})
	for _, name := range []string{"candidates", "token-file", "ca-file", "data-dir", "json"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if got := cmd.Flags().Lookup("json").Usage; got != "print JSON" {
		t.Errorf("--json usage %q", got)
	}
}
