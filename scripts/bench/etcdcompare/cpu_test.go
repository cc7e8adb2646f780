package main

import (
	"os"
	"testing"
)

func TestParseStatCPUms(t *testing.T) {
	// A command name with spaces and a parenthesis: fields are counted after
	// the last ')'. utime 250 and stime 50 ticks are 3,000 ms.
	line := "4242 (elanous (node) a) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 9 0 1000 1 1 0"
	if got, ok := parseStatCPUms(line); !ok || got != 3000 {
		t.Errorf("parseStatCPUms = %v, %v; want 3000, true", got, ok)
	}
	for _, bad := range []string{"", "4242 (x", "4242 (x) S 1 2", "4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 u s 0"} {
		if _, ok := parseStatCPUms(bad); ok {
			t.Errorf("parseStatCPUms(%q) ok, want a refusal", bad)
		}
	}
	if _, ok := procCPUms(os.Getpid()); !ok {
		t.Errorf("procCPUms of this process failed")
	}
}
