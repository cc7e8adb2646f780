package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// version and revision identify the build. deploy/build-image sets both:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.revision=$(git rev-parse HEAD)"
//
// When revision is not set, the VCS revision the go command stamped into the
// binary is used ("<commit>-dirty" for a modified tree), else "unknown".
var (
	version  = "0.1.0-dev"
	revision = ""
)

// versionInfo is the output of "version --json".
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

func currentVersion() versionInfo {
	return versionInfo{Version: version, Revision: buildRevision(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// buildRevision returns revision, else the go command's VCS stamp, else "unknown".
func buildRevision() string {
	if revision != "" {
		return revision
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// versionLine is "elanous-node <version> (<revision>, <go version>, <os>/<arch>)".
func versionLine() string {
	v := currentVersion()
	return fmt.Sprintf("elanous-node %s (%s, %s, %s/%s)", v.Version, v.Revision, v.Go, v.OS, v.Arch)
}

// buildInfoCollector exports elanous_build_info{version,revision,goversion} 1.
func buildInfoCollector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elanous_build_info",
		Help: "Always 1; the labels name the running build: version, VCS revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	v := currentVersion()
	g.WithLabelValues(v.Version, v.Revision, v.Go).Set(1)
	return g
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and revision of elanous-node and the Go toolchain that built it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(currentVersion())
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as JSON")
	return cmd
}
