package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

// docsTableRow matches a row of the key table in docs/configuration.md: the key
// in backticks in the first cell, the default's first backticked value in the
// second.
var docsTableRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]*)`")

// docsDefaults returns the key table of docs/configuration.md as key → the
// default it documents, failing on a duplicate key or a row it cannot read.
func docsDefaults(t *testing.T, text string) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(text, "\n| key | default | meaning |\n|---|---|---|\n")
	if !ok {
		t.Fatal(`docs/configuration.md has no "| key | default | meaning |" table`)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		m := docsTableRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/configuration.md: cannot read the key and default of row %q", line)
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/configuration.md lists %s twice", m[1])
		}
		out[m[1]] = m[2]
	}
	return out
}

// docDefault is how docs/configuration.md writes a default: a duration as Go
// prints it without trailing zero units ("5m", not "5m0s"), the empty string as
// "", a list in brackets.
func docDefault(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		return x
	case time.Duration:
		s := x.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []int:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = strconv.Itoa(p)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []map[string]any:
		if len(x) == 0 {
			return "[]"
		}
	}
	return fmt.Sprint(v)
}

// TestDocs_ConfigurationTable holds docs/configuration.md to the code: its
// table names every key config knows (knownKeys, the keys Load accepts), each
// with the default Default gives it, and no key config does not know.
func TestDocs_ConfigurationTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := docsDefaults(t, string(data))

	v := viper.New()
	setDefaults(v, Default())
	known := knownKeys()
	if len(known) < 40 {
		t.Fatalf("knownKeys returned only %d keys", len(known))
	}
	for _, key := range slices.Sorted(maps.Keys(known)) {
		got, ok := documented[key]
		if !ok {
			t.Errorf("docs/configuration.md does not list %s (default %s)", key, docDefault(v.Get(key)))
			continue
		}
		if want := docDefault(v.Get(key)); got != want {
			t.Errorf("docs/configuration.md gives %s the default `%s`; config.Default() gives `%s`", key, got, want)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(documented)) {
		if !known[key] {
			t.Errorf("docs/configuration.md lists %s, which config does not know", key)
		}
	}
}

// TestDocs_DocDefault pins the spelling the table uses for each kind of value.
func TestDocs_DocDefault(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{"", `""`},
		{"info", "info"},
		{500 * time.Millisecond, "500ms"},
		{5 * time.Minute, "5m"},
		{2 * time.Hour, "2h"},
		{90 * time.Second, "1m30s"},
		{0.25, "0.25"},
		{true, "true"},
		{8192, "8192"},
		{[]int{1, 2}, "[1, 2]"},
		{[]map[string]any{}, "[]"},
	} {
		if got := docDefault(c.in); got != c.want {
			t.Errorf("docDefault(%#v) = %q, want %q", c.in, got, c.want)
		}
	}
}
