package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is one broken property.
type Violation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// Options tune Check.
type Options struct {
	// OutDir receives porcupine's HTML visualisation of a table whose history
	// is not linearizable ("" writes none).
	OutDir string
	// Timeout bounds each porcupine check; a check that runs out counts as
	// not proven linearizable.
	Timeout time.Duration
	// Clock maps answered expiresAt onto the history's clock for
	// CheckRenewals; without WallStartMs only its send-time rules run.
	Clock Clock
}

// Result is the verdict on one history.
type Result struct {
	Linearizable bool
	Violations   []Violation
	// Files lists the visualisations written.
	Files []string
	// Notes are findings that break no stated property but deserve a look.
	Notes []string
}

// Check runs every checker on h: porcupine on the lease table and on the
// resource table, the lease-interval check, the generation check and the
// renewal check.
// Violations found by other means (state hashes, logs) are the caller's.
func Check(h []Op, opt Options) Result {
	if opt.Timeout == 0 {
		opt.Timeout = 2 * time.Minute
	}
	res := Result{Linearizable: true}
	tables := []struct {
		name  string
		model porcupine.Model
		ops   []porcupine.Operation
	}{
		{"leases", LeaseModel.ToModel(), leaseOperations(h)},
		{"resources", ResourceModel.ToModel(), resourceOperations(h)},
	}
	for _, t := range tables {
		verdict := porcupine.CheckOperationsTimeout(t.model, t.ops, opt.Timeout)
		if verdict == porcupine.Ok {
			continue
		}
		res.Linearizable = false
		what := "not linearizable"
		if verdict == porcupine.Unknown {
			what = fmt.Sprintf("linearizability not decided within %s", opt.Timeout)
		}
		res.Violations = append(res.Violations, Violation{Kind: "linearizability", Detail: fmt.Sprintf(
			"%s: %s (%d operations)%s", t.name, what, len(t.ops), failingKeys(t.model, t.ops, opt.Timeout))})
		if opt.OutDir == "" {
			continue
		}
		_, info := porcupine.CheckOperationsVerbose(t.model, t.ops, opt.Timeout)
		path := filepath.Join(opt.OutDir, t.name+"-porcupine.html")
		if err := os.MkdirAll(opt.OutDir, 0o755); err == nil {
			if err := porcupine.VisualizePath(t.model, info, path); err == nil {
				res.Files = append(res.Files, path)
			}
		}
	}
	res.Violations = append(res.Violations, CheckLeaseIntervals(h)...)
	res.Violations = append(res.Violations, CheckGenerations(h)...)
	res.Violations = append(res.Violations, CheckRenewals(h, opt.Clock)...)
	iv, notes := CheckIdempotency(h)
	res.Violations = append(res.Violations, iv...)
	res.Notes = append(res.Notes, notes...)
	return res
}

// failingKeys names the partitions (ports, resource ids) that alone are not
// linearizable.
func failingKeys(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) string {
	var bad []string
	for _, part := range m.Partition(ops) {
		if len(part) == 0 {
			continue
		}
		one := m
		one.Partition = nil
		if porcupine.CheckOperationsTimeout(one, part, timeout) != porcupine.Ok {
			bad = append(bad, keyOf(part[0].Input))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "; failing keys: " + strings.Join(bad, ", ")
}

func keyOf(in any) string {
	switch in := in.(type) {
	case leaseInput:
		return fmt.Sprintf("port %d", in.Port)
	case resInput:
		return "resource " + in.ID
	}
	return fmt.Sprint(in)
}
