package wire

import (
	"errors"
	"strings"
	"testing"
)

// The name rules: each holds for its yes inputs and fails for its no inputs.
func TestValidNames(t *testing.T) {
	tests := []struct {
		rule    string
		valid   func(string) bool
		yes, no []string
	}{
		{"ValidMachine", ValidMachine,
			[]string{"mbp", "MBP-2.local_x", "0", strings.Repeat("m", 253)},
			[]string{strings.Repeat("m", 254), "", "__proto__", "constructor", "prototype", ".hidden", "_x", "a/b", "mäschine", "a\n"}},
		{"ValidCandidate", ValidCandidate,
			[]string{"node-a", "0", strings.Repeat("n", 32), "n1-2-3"},
			[]string{strings.Repeat("n", 33), "Node-a", "-node", "node.a", "node_a", ""}},
	}
	for _, tt := range tests {
		for _, in := range tt.yes {
			if !tt.valid(in) {
				t.Errorf("%s(%q) = false, want true", tt.rule, in)
			}
		}
		for _, in := range tt.no {
			if tt.valid(in) {
				t.Errorf("%s(%q) = true, want false", tt.rule, in)
			}
		}
	}
}

func TestValidPort(t *testing.T) {
	for _, port := range []int{1, 80, 31413, 65535} {
		if !ValidPort(port) {
			t.Errorf("ValidPort(%d) = false, want true", port)
		}
	}
	for _, port := range []int{0, -1, 65536, 1 << 31} {
		if ValidPort(port) {
			t.Errorf("ValidPort(%d) = true, want false", port)
		}
	}
}

func TestSplitHostPort(t *testing.T) {
	tests := []struct {
		in      string
		host    string
		port    int
		errPart string // "" means no error
	}{
		{in: "10.0.0.1:31412", host: "10.0.0.1", port: 31412},
		{in: "node-a.example:1", host: "node-a.example", port: 1},
		{in: "[::1]:65535", host: "::1", port: 65535},
		{in: ":31413", host: "", port: 31413}, // a listen address: the caller judges the host
		{in: "0.0.0.0:31413", host: "0.0.0.0", port: 31413},
		{in: "h:031412", host: "h", port: 31412},
		{in: "h:+80", host: "h", port: 80}, // strconv.Atoi's reading, which Apply has always used
		{in: "h:0", errPart: `"h:0": port must be 1-65535`},
		{in: "h:65536", errPart: `"h:65536": port must be 1-65535`},
		{in: "h:-1", errPart: "port must be 1-65535"},
		{in: "h:http", errPart: "port must be 1-65535"},
		{in: "h:", errPart: "port must be 1-65535"},
		{in: "31412", errPart: `"31412" is not host:port`},
		{in: "10.0.0.1", errPart: `"10.0.0.1" is not host:port`},
		{in: "::1:31412", errPart: "is not host:port"},
		{in: "", errPart: "is not host:port"},
	}
	for _, tt := range tests {
		host, port, err := SplitHostPort(tt.in)
		if tt.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errPart) {
				t.Errorf("SplitHostPort(%q) = %q, %d, %v, want an error containing %q", tt.in, host, port, err, tt.errPart)
			}
			continue
		}
		if err != nil || host != tt.host || port != tt.port {
			t.Errorf("SplitHostPort(%q) = %q, %d, %v, want %q, %d", tt.in, host, port, err, tt.host, tt.port)
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
