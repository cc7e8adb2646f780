package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go runs on.
const clockTicks = 100

// procCPUms is the CPU time (user + system) process pid has used, in ms,
// from /proc/PID/stat; ok is false when it cannot be read.
func procCPUms(pid int) (ms float64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return parseStatCPUms(string(data))
}

// parseStatCPUms reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) is in parentheses and may
// hold spaces, so the fields are counted after its closing parenthesis.
func parseStatCPUms(line string) (float64, bool) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11]; stime f[12].
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(u+s) * 1000 / clockTicks, true
}

// membersCPUms is the CPU time the members in u have used, summed; ok is
// false when one of them could not be read.
func membersCPUms(u []nodeUsage) (float64, bool) {
	var sum float64
	for _, n := range u {
		ms, ok := procCPUms(n.PID)
		if !ok {
			return 0, false
		}
		sum += ms
	}
	return sum, true
}
