package main

import (
	"slices"
	"strings"
	"testing"
)

// TestListCmds_ConsistentByDefault checks that resources list, lease list and
// token list ask for a consistent read unless --stale is given.
func TestListCmds_ConsistentByDefault(t *testing.T) {
	a := newFakeCandidate(t, "node-a", "node-a", 1)
	t.Setenv(tokenEnv, cliTokenA)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"resources", "list"}, "GET /v1/resources?consistent=true"},
		{[]string{"resources", "list", "--stale"}, "GET /v1/resources"},
		{[]string{"resources", "list", "--kind", "machine"}, "GET /v1/resources?consistent=true&kind=machine"},
		{[]string{"resources", "list", "--kind", "machine", "--stale"}, "GET /v1/resources?kind=machine"},
		{[]string{"lease", "list"}, "GET /v1/leases/port?consistent=true"},
		{[]string{"lease", "list", "--stale"}, "GET /v1/leases/port"},
		{[]string{"token", "list"}, "GET /v1/tokens/member?consistent=true"},
		{[]string{"token", "list", "--stale"}, "GET /v1/tokens/member"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := slices.Concat(tt.args, []string{"--data-dir", t.TempDir(), "--candidates", "node-a=" + a.URL})
			if _, stderr, err := runCLI(t.Context(), args...); err != nil {
				t.Fatalf("%v: %v\n%s", tt.args, err, stderr)
			}
			seen := a.seen()
			if got, want := seen[len(seen)-1], tt.want+" auth="+cliTokenA; got != want {
				t.Errorf("%v sent %q, want %q", tt.args, got, want)
			}
		})
	}
}
