package member

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Load is the `load` attribute a member attaches to its machine resource,
// with member.ts measureLoad's field names: the 1, 5 and 15 minute load
// averages, the CPU count, free and total memory in bytes, and when it was
// measured (Unix ms).
type Load struct {
	LoadAvg    [3]float64 `json:"loadAvg"`
	CPUCount   int        `json:"cpuCount"`
	FreeMem    uint64     `json:"freeMem"`
	TotalMem   uint64     `json:"totalMem"`
	ObservedAt int64      `json:"observedAt"`
}

// MeasureLoad reads the load of this machine at now: /proc/loadavg,
// /proc/meminfo (free memory is MemAvailable, as Node's os.freemem reports
// it, else MemFree) and runtime.NumCPU. Values it cannot read (another OS, a
// restricted /proc) are left zero; measuring never fails.
func MeasureLoad(now time.Time) Load { return measureLoadFrom("/proc", now) }

// measureLoadFrom is MeasureLoad with the proc root as a parameter, for tests.
func measureLoadFrom(proc string, now time.Time) Load {
	l := Load{CPUCount: runtime.NumCPU(), ObservedAt: now.UnixMilli()}
	if data, err := os.ReadFile(filepath.Join(proc, "loadavg")); err == nil { //nolint:gosec // G304: /proc, or a test's copy of it
		fields := strings.Fields(string(data))
		for i := 0; i < 3 && i < len(fields); i++ {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				l.LoadAvg[i] = v
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(proc, "meminfo")); err == nil { //nolint:gosec // G304: /proc, or a test's copy of it
		mem := parseMeminfo(data)
		l.TotalMem = mem["MemTotal"]
		if avail, ok := mem["MemAvailable"]; ok {
			l.FreeMem = avail
		} else {
			l.FreeMem = mem["MemFree"]
		}
	}
	return l
}

// parseMeminfo reads "Key:   123 kB" lines into bytes.
func parseMeminfo(data []byte) map[string]uint64 {
	out := make(map[string]uint64)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && strings.EqualFold(fields[1], "kB") {
			v *= 1024
		}
		out[key] = v
	}
	return out
}

// raw encodes the load as an attribute value.
func (l Load) raw() json.RawMessage {
	data, _ := json.Marshal(l) // a struct of numbers always encodes
	return data
}
