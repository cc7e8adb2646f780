package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// writeFile writes a config file into a fresh temp dir and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "elanous.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveFlags returns a flag set defined by BindFlags and parsed from args.
func serveFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%q) = %v", args, err)
	}
	return fs
}

func TestLoad_Precedence(t *testing.T) {
	file := writeFile(t, `
node: { id: node-f }
http: { addr: "127.0.0.1:1001" }
raft: { election_timeout: 750ms }
cluster: { bootstrap: true }
`)
	tests := []struct {
		name      string
		file      string
		env       map[string]string
		args      []string
		addr      string
		id        string
		election  time.Duration
		bootstrap bool
	}{
		{
			name: "defaults", addr: "0.0.0.0:31413", id: "node-a",
			election: 500 * time.Millisecond, bootstrap: true,
		},
		{
			name: "file over defaults", file: file, addr: "127.0.0.1:1001", id: "node-f",
			election: 750 * time.Millisecond, bootstrap: true,
		},
		{
			name: "env over file", file: file,
			env: map[string]string{
				"ELANOUS_HTTP_ADDR":             "127.0.0.1:1002",
				"ELANOUS_RAFT_ELECTION_TIMEOUT": "2s",
				"ELANOUS_CLUSTER_BOOTSTRAP":     "false",
			},
			addr: "127.0.0.1:1002", id: "node-f", election: 2 * time.Second, bootstrap: false,
		},
		{
			name: "env over defaults without a file",
			env:  map[string]string{"ELANOUS_NODE_ID": "node-e"},
			addr: "0.0.0.0:31413", id: "node-e", election: 500 * time.Millisecond, bootstrap: true,
		},
		{
			name: "flags over env", file: file,
			env:  map[string]string{"ELANOUS_HTTP_ADDR": "127.0.0.1:1002", "ELANOUS_NODE_ID": "node-e"},
			args: []string{"--http-addr", "127.0.0.1:1003", "--node-id=node-g", "--bootstrap=false"},
			addr: "127.0.0.1:1003", id: "node-g", election: 750 * time.Millisecond, bootstrap: false,
		},
		{
			name: "unchanged flags do not override", file: file,
			env:  map[string]string{"ELANOUS_HTTP_ADDR": "127.0.0.1:1002"},
			args: []string{"--raft-addr", "127.0.0.1:1004"},
			addr: "127.0.0.1:1002", id: "node-f", election: 750 * time.Millisecond, bootstrap: true,
		},
		{
			name: "empty env counts as unset", file: file,
			env:  map[string]string{"ELANOUS_HTTP_ADDR": ""},
			addr: "127.0.0.1:1001", id: "node-f", election: 750 * time.Millisecond, bootstrap: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load(LoadOptions{File: tt.file, Flags: serveFlags(t, tt.args...)})
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			if c.HTTP.Addr != tt.addr {
				t.Errorf("Load() http.addr = %q, want %q", c.HTTP.Addr, tt.addr)
			}
			if c.Node.ID != tt.id {
				t.Errorf("Load() node.id = %q, want %q", c.Node.ID, tt.id)
			}
			if c.Raft.ElectionTimeout != tt.election {
				t.Errorf("Load() raft.election_timeout = %v, want %v", c.Raft.ElectionTimeout, tt.election)
			}
			if c.Cluster.Bootstrap != tt.bootstrap {
				t.Errorf("Load() cluster.bootstrap = %v, want %v", c.Cluster.Bootstrap, tt.bootstrap)
			}
		})
	}
}

func TestLoad_DefaultsOnly(t *testing.T) {
	got, err := Load(LoadOptions{Env: []string{}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Load() with no sources = %+v, want Default() %+v", got, want)
	}
}

func TestLoad_EnvListOverridesProcessEnv(t *testing.T) {
	t.Setenv("ELANOUS_NODE_ID", "node-process")
	c, err := Load(LoadOptions{Env: []string{"ELANOUS_NODE_ID=node-given", "PATH=/bin"}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if c.Node.ID != "node-given" {
		t.Errorf("Load() node.id = %q, want %q (from LoadOptions.Env, not the process)", c.Node.ID, "node-given")
	}
}

func TestLoad_ConfigFlag(t *testing.T) {
	file := writeFile(t, "node: { id: node-f }\n")
	c, err := Load(LoadOptions{Flags: serveFlags(t, "--config", file), Env: []string{}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if c.Node.ID != "node-f" {
		t.Errorf("Load() with --config: node.id = %q, want %q", c.Node.ID, "node-f")
	}
}

func TestLoad_EnvTypes(t *testing.T) {
	env := []string{
		"ELANOUS_RAFT_HEARTBEAT_TIMEOUT=300ms",
		"ELANOUS_RAFT_LEADER_LEASE_TIMEOUT=1m30s",
		"ELANOUS_RAFT_GRACE=5s",
		"ELANOUS_RAFT_SNAPSHOT_THRESHOLD=100",
		"ELANOUS_RAFT_MAX_APPEND_ENTRIES=32",
		"ELANOUS_HTTP_METRICS_AUTH=true",
		"ELANOUS_PORTS_RESERVED=1000, 1001,1002",
		"ELANOUS_PORTS_TEST_START=40000",
		"ELANOUS_PORTS_OFFLINE_END=31600",
		"ELANOUS_TOKENS_FILE=/etc/elanous/tokens.json",
		"ELANOUS_LOG_FORMAT=json",
		"ELANOUS_LOG_ACCESS=true",
		"ELANOUS_TTL_RENEW_SLACK=0.5",
		"ELANOUS_TTL_RENEW_SLACK_MAX=90s",
		`ELANOUS_CLUSTER_CANDIDATES=[{"machine":"node-a","url":"http://10.0.0.1:31413","raft":"10.0.0.1:31412"},` +
			`{"machine":"node-b","url":"http://10.0.0.2:31413","raft":"10.0.0.2:31412"}]`,
	}
	c, err := Load(LoadOptions{Env: env})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"raft.heartbeat_timeout", c.Raft.HeartbeatTimeout, 300 * time.Millisecond},
		{"raft.leader_lease_timeout", c.Raft.LeaderLeaseTimeout, 90 * time.Second},
		{"raft.grace", c.Raft.Grace, 5 * time.Second},
		{"raft.snapshot_threshold", c.Raft.SnapshotThreshold, uint64(100)},
		{"raft.max_append_entries", c.Raft.MaxAppendEntries, 32},
		{"http.metrics_auth", c.HTTP.MetricsAuth, true},
		{"ports.reserved", c.Ports.Reserved, []int{1000, 1001, 1002}},
		{"ports.test", c.Ports.Test, Band{Start: 40000, End: 31499}},
		{"ports.offline", c.Ports.Offline, Band{Start: 31500, End: 31600}},
		{"tokens.file", c.Tokens.File, "/etc/elanous/tokens.json"},
		{"log.format", c.Log.Format, "json"},
		{"log.access", c.Log.Access, true},
		{"ttl.renew_slack", c.TTL.RenewSlack, 0.5},
		{"ttl.renew_slack_max", c.TTL.RenewSlackMax, 90 * time.Second},
		{"cluster.candidates", c.Cluster.Candidates, []Candidate{
			{Machine: "node-a", URL: "http://10.0.0.1:31413", Raft: "10.0.0.1:31412"},
			{Machine: "node-b", URL: "http://10.0.0.2:31413", Raft: "10.0.0.2:31412"},
		}},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("Load() %s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestLoad_ReservedPortsAsJSON(t *testing.T) {
	c, err := Load(LoadOptions{Env: []string{"ELANOUS_PORTS_RESERVED=[7, 8]"}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if want := []int{7, 8}; !reflect.DeepEqual(c.Ports.Reserved, want) {
		t.Errorf("Load() ports.reserved = %v, want %v", c.Ports.Reserved, want)
	}
}

func TestLoad_File(t *testing.T) {
	file := writeFile(t, `
node:    { id: node-b, data_dir: /srv/elanous }
http:    { addr: 0.0.0.0:31423, advertise: http://10.0.0.2:31413, metrics_auth: true }
raft:    { addr: 0.0.0.0:31422, advertise: 10.0.0.2:31412,
           heartbeat_timeout: 400ms, election_timeout: 1s, leader_lease_timeout: 200ms, grace: 3s }
cluster:
  bootstrap: false
  candidates:
    - { machine: node-a, url: http://10.0.0.1:31413, raft: 10.0.0.1:31412 }
    - { machine: node-b, url: http://10.0.0.2:31413, raft: 10.0.0.2:31412 }
tokens:  { file: /srv/elanous/tokens.json }
ports:   { reserved: [1, 2], test: { start: 40000, end: 40010 }, offline: { start: 40020, end: 40030 } }
log:     { level: debug, format: json }
tls:     { allow_plaintext: true }
`)
	got, err := Load(LoadOptions{File: file, Env: []string{}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := Default()
	want.Node = NodeConfig{ID: "node-b", DataDir: "/srv/elanous"}
	want.HTTP = HTTPConfig{Addr: "0.0.0.0:31423", Advertise: "http://10.0.0.2:31413", MetricsAuth: true}
	want.Raft.Addr, want.Raft.Advertise = "0.0.0.0:31422", "10.0.0.2:31412"
	want.Raft.HeartbeatTimeout = 400 * time.Millisecond
	want.Raft.ElectionTimeout = time.Second
	want.Raft.LeaderLeaseTimeout = 200 * time.Millisecond
	want.Raft.Grace = 3 * time.Second
	want.Cluster = ClusterConfig{Bootstrap: false, Candidates: []Candidate{
		{Machine: "node-a", URL: "http://10.0.0.1:31413", Raft: "10.0.0.1:31412"},
		{Machine: "node-b", URL: "http://10.0.0.2:31413", Raft: "10.0.0.2:31412"},
	}}
	want.Tokens.File = "/srv/elanous/tokens.json"
	want.Ports = PortsConfig{Reserved: []int{1, 2}, Test: Band{40000, 40010}, Offline: Band{40020, 40030}}
	want.Log = LogConfig{Level: "debug", Format: "json"}
	want.TLS.AllowPlaintext = true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load() =\n%+v\nwant\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate() of the loaded file = %v, want nil", err)
	}
}

func TestLoad_EnvCandidatesOverrideFile(t *testing.T) {
	file := writeFile(t, `
cluster:
  candidates:
    - { machine: node-a, url: http://10.0.0.1:31413, raft: 10.0.0.1:31412 }
`)
	env := []string{`ELANOUS_CLUSTER_CANDIDATES=[{"machine":"node-z","url":"http://z:1","raft":"z:2"}]`}
	c, err := Load(LoadOptions{File: file, Env: env})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := []Candidate{{Machine: "node-z", URL: "http://z:1", Raft: "z:2"}}
	if !reflect.DeepEqual(c.Cluster.Candidates, want) {
		t.Errorf("Load() cluster.candidates = %+v, want %+v", c.Cluster.Candidates, want)
	}
}

func TestLoad_Errors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	tests := []struct {
		name string
		file string // file body; "" means no file
		path string // explicit path, overrides file
		env  []string
		want []string // substrings of the error
	}{
		{name: "missing explicit file", path: missing, want: []string{"read config file", "absent.yaml"}},
		{name: "unknown top-level key", file: "nodes: { id: x }\n", want: []string{"unknown key", `"nodes.id"`}},
		{name: "unknown nested key", file: "node: { idd: x }\nraft: { election: 1s }\n",
			want: []string{"unknown keys", `"node.idd"`, `"raft.election"`}},
		{name: "unknown candidate field", file: "cluster: { candidates: [ { machine: a, url: http://a, raft: a:1, port: 3 } ] }\n",
			want: []string{"decode config", "port"}},
		{name: "malformed yaml", file: "node: [\n", want: []string{"parse config file"}},
		{name: "bad duration in file", file: "raft: { election_timeout: soon }\n", want: []string{"decode config", "election_timeout"}},
		{name: "bad duration in env", env: []string{"ELANOUS_RAFT_ELECTION_TIMEOUT=soon"}, want: []string{"election_timeout"}},
		{name: "candidates env not JSON", env: []string{"ELANOUS_CLUSTER_CANDIDATES=node-a"},
			want: []string{"ELANOUS_CLUSTER_CANDIDATES", "JSON array"}},
		{name: "candidates env unknown field", env: []string{`ELANOUS_CLUSTER_CANDIDATES=[{"machine":"a","host":"b"}]`},
			want: []string{"ELANOUS_CLUSTER_CANDIDATES", "host"}},
		{name: "candidates env trailing data", env: []string{`ELANOUS_CLUSTER_CANDIDATES=[] []`},
			want: []string{"ELANOUS_CLUSTER_CANDIDATES", "trailing"}},
		{name: "reserved env not numbers", env: []string{"ELANOUS_PORTS_RESERVED=1,x"},
			want: []string{"ELANOUS_PORTS_RESERVED", `"x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			env := tt.env
			if env == nil {
				env = []string{}
			}
			_, err := Load(LoadOptions{File: path, Env: env})
			if err == nil {
				t.Fatal("Load() error = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load() error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestBindFlags_KeepsInheritedConfig(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("config", "", "inherited")
	BindFlags(fs) // must not panic on the redefinition
	for _, name := range []string{"config", "node-id", "data-dir", "http-addr", "http-advertise", "raft-addr", "raft-advertise", "bootstrap"} {
		if fs.Lookup(name) == nil {
			t.Errorf("BindFlags() did not define --%s", name)
		}
	}
}

func TestEnvVar(t *testing.T) {
	for key, want := range map[string]string{
		"http.addr":             "ELANOUS_HTTP_ADDR",
		"raft.election_timeout": "ELANOUS_RAFT_ELECTION_TIMEOUT",
		"ports.test.start":      "ELANOUS_PORTS_TEST_START",
		"cluster.candidates":    "ELANOUS_CLUSTER_CANDIDATES",
	} {
		if got := EnvVar(key); got != want {
			t.Errorf("EnvVar(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestLoad_TLSKeys(t *testing.T) {
	file := writeFile(t, `
tls: { ca_file: /etc/elanous/tls/ca.pem, cert_file: /etc/elanous/tls/node-a.pem, key_file: /etc/elanous/tls/node-a-key.pem }
`)
	got, err := Load(LoadOptions{File: file, Env: []string{"ELANOUS_TLS_VERIFY_INCOMING_API=true", "ELANOUS_TLS_KEY_FILE=/k.pem"}})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := TLSConfig{CAFile: "/etc/elanous/tls/ca.pem", CertFile: "/etc/elanous/tls/node-a.pem", KeyFile: "/k.pem", VerifyIncomingAPI: true}
	if got.TLS != want {
		t.Errorf("Load() tls = %+v, want %+v", got.TLS, want)
	}
	if _, err := Load(LoadOptions{File: writeFile(t, "tls: { ca: x }\n"), Env: []string{}}); err == nil || !strings.Contains(err.Error(), `"tls.ca"`) {
		t.Errorf("Load() with an unknown tls key error = %v, want it named", err)
	}
}
