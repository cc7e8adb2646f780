package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
)

// Build is a `go build -o Out` of the elanous-node binary.
type Build struct {
	Dir   string   // where go runs (inside the product's module)
	Pkg   string   // the package, relative to Dir ("." or "./cmd/elanous-node")
	Out   string   // the binary's path
	Race  bool     // -race
	Flags []string // more flags (-tags chaos, -trimpath)
	Env   []string // appended to this process's environment
}

// Run builds; its error carries go's output.
func (b Build) Run(ctx context.Context) error {
	args := []string{"build", "-o", b.Out}
	if b.Race {
		args = append(args, "-race")
	}
	args = append(append(args, b.Flags...), b.Pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.Dir
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// Binary builds once, on the first call of Path, and returns the same
// path (or error) to every call after.
type Binary struct {
	Build Build
	once  sync.Once
	err   error
}

// Path builds the binary on first use and returns its path.
func (b *Binary) Path(ctx context.Context) (string, error) {
	b.once.Do(func() { b.err = b.Build.Run(ctx) })
	return b.Build.Out, b.err
}

// RaceEnabled reports whether this program was built with -race (a test
// binary then builds elanous-node with -race too).
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}
