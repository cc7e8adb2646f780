package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestValidMachine(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"mbp", true},
		{"MBP-2.local_x", true},
		{"0", true},
		{strings.Repeat("m", 253), true},
		{strings.Repeat("m", 254), false},
		{"", false},
		{"__proto__", false},
		{"constructor", false},
		{"prototype", false},
		{".hidden", false},
		{"_x", false},
		{"a/b", false},
		{"mäschine", false},
		{"a\n", false},
	}
	for _, tt := range tests {
		if got := ValidMachine(tt.name); got != tt.want {
			t.Errorf("ValidMachine(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidCandidate(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"node-a", true},
		{"0", true},
		{strings.Repeat("n", 32), true},
		{strings.Repeat("n", 33), false},
		{"Node-a", false},
		{"-node", false},
		{"node.a", false},
		{"node_a", false},
		{"n1-2-3", true},
		{"", false},
	}
	for _, tt := range tests {
		if got := ValidCandidate(tt.name); got != tt.want {
			t.Errorf("ValidCandidate(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseOrigin(t *testing.T) {
	tests := []struct {
		in, want string // want "" means an error
		errPart  string
	}{
		{in: "http://10.0.0.1:31413", want: "http://10.0.0.1:31413"},
		{in: "http://10.0.0.1:31413/", want: "http://10.0.0.1:31413"},
		{in: "HTTP://Node-A.Example:31413", want: "http://node-a.example:31413"},
		{in: "http://a.example:80", want: "http://a.example"},
		{in: "https://a.example:443/", want: "https://a.example"},
		{in: "https://a.example:80", want: "https://a.example:80"},
		{in: "http://[::1]:31413", want: "http://[::1]:31413"},
		{in: "http://[::1]:80", want: "http://[::1]"},
		{in: "http://a.example:031413", want: "http://a.example:31413"},
		{in: "http://a.example/?", want: "http://a.example"}, // empty query, as URL.search is "" in the TS client
		{in: "ftp://a.example", errPart: "scheme must be http or https"},
		{in: "a.example:31413", errPart: "scheme must be http or https"},
		{in: "//a.example", errPart: "scheme must be http or https"},
		{in: "http://", errPart: "missing host"},
		{in: "http://:31413", errPart: "missing host"},
		{in: "http:a.example", errPart: "missing host"},
		{in: "http://user@a.example", errPart: "user or password"},
		{in: "http://user:pw@a.example", errPart: "user or password"},
		{in: "http://a.example/?x=1", errPart: "query"},
		{in: "http://a.example/#x", errPart: "fragment"},
		{in: "http://a.example/v1", errPart: "no path"},
		{in: "http://a.example/%2F", errPart: "no path"},
		{in: "http://a.example//", errPart: "no path"},
		{in: "http://a.example:0", errPart: "port must be 1-65535"},
		{in: "http://a.example:65536", errPart: "port must be 1-65535"},
		{in: "http://a.example:x", errPart: "not a URL"},
		{in: "http://a b", errPart: "not a URL"},
		{in: "", errPart: "scheme must be http or https"},
		// From the member client's table: white space is trimmed, credentials never echoed.
		{in: "  http://10.0.0.1:31413  ", want: "http://10.0.0.1:31413"},
		{in: "HTTPS://Node-A.Example:443/", want: "https://node-a.example"},
		{in: "http://h/?a=1", errPart: "query"},
		{in: "http://h:99999", errPart: "port must be 1-65535"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseOrigin(tt.in)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) || !errors.Is(err, ErrInvalidURL) {
					t.Fatalf("ParseOrigin(%q) = %q, %v; want an ErrInvalidURL containing %q", tt.in, got, err, tt.errPart)
				}
				if strings.Contains(tt.in, "pw") && strings.Contains(err.Error(), "pw") {
					t.Errorf("ParseOrigin(%q) error %q repeats the credentials", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseOrigin(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
			}
		})
	}
}
