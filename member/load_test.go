package member

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestMeasureLoadFrom(t *testing.T) {
	proc := t.TempDir()
	os.WriteFile(filepath.Join(proc, "loadavg"), []byte("0.52 1.25 2.00 3/456 7890\n"), 0o644)
	os.WriteFile(filepath.Join(proc, "meminfo"), []byte(
		"MemTotal:       16318412 kB\nMemFree:          512000 kB\nMemAvailable:    8000000 kB\nHugePages_Total:       0\n"), 0o644)
	now := time.UnixMilli(1_700_000_000_123)
	got := measureLoadFrom(proc, now)
	want := Load{LoadAvg: [3]float64{0.52, 1.25, 2}, CPUCount: runtime.NumCPU(),
		FreeMem: 8000000 * 1024, TotalMem: 16318412 * 1024, ObservedAt: 1_700_000_000_123}
	if got != want {
		t.Errorf("measureLoadFrom() = %+v, want %+v", got, want)
	}
	if data := string(got.raw()); data != `{"loadAvg":[0.52,1.25,2],"cpuCount":`+strconv.Itoa(runtime.NumCPU())+
		`,"freeMem":8192000000,"totalMem":16710053888,"observedAt":1700000000123}` {
		t.Errorf("raw() = %s", data)
	}
}

func TestMeasureLoadFrom_MemFreeFallbackAndMissing(t *testing.T) {
	proc := t.TempDir()
	os.WriteFile(filepath.Join(proc, "meminfo"), []byte("MemTotal: 100 kB\nMemFree: 40 kB\n"), 0o644)
	got := measureLoadFrom(proc, time.UnixMilli(0))
	if got.FreeMem != 40*1024 || got.TotalMem != 100*1024 || got.LoadAvg != [3]float64{} {
		t.Errorf("measureLoadFrom() = %+v, want MemFree and zero load averages", got)
	}
	empty := measureLoadFrom(filepath.Join(proc, "missing"), time.UnixMilli(5))
	if empty.TotalMem != 0 || empty.CPUCount != runtime.NumCPU() || empty.ObservedAt != 5 {
		t.Errorf("measureLoadFrom(missing) = %+v, want zeros but the CPU count", empty)
	}
}

func TestMeasureLoad_ThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if got := MeasureLoad(time.Now()); got.TotalMem == 0 || got.CPUCount < 1 {
		t.Errorf("MeasureLoad() = %+v, want memory and CPUs", got)
	}
}
