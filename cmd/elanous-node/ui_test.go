package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestConsoleURL(t *testing.T) {
	for _, tc := range []struct{ origin, view, token, want string }{
		{"http://127.0.0.1:31413", "cluster", "ab", "http://127.0.0.1:31413/ui/cluster#token=ab"},
		{"https://10.0.0.1:31413/", "fleet", "", "https://10.0.0.1:31413/ui/fleet"},
	} {
		if got := consoleURL(tc.origin, tc.view, tc.token); got != tc.want {
			t.Errorf("consoleURL(%q, %q, %q) = %q, want %q", tc.origin, tc.view, tc.token, got, tc.want)
		}
	}
}

// TestUICommand_RefusesUnknownView checks --view before anything is asked.
func TestUICommand_RefusesUnknownView(t *testing.T) {
	cmd := newUICmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--view", "nodes", "--candidates", "http://127.0.0.1:1"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "want one of cluster, fleet, ports, tokens, timeline") {
		t.Errorf("ui --view nodes = %v, want the list of views", err)
	}
}
