package config

import (
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/hashicorp/raft"
)

// loopbackYAML is a valid configuration of three candidates on loopback.
const loopbackYAML = `
node: { id: node-a, data_dir: /tmp/elanous-a }
http: { addr: "127.0.0.1:31413", advertise: "http://127.0.0.1:31413" }
raft: { advertise: "127.0.0.1:31412", heartbeat_timeout: 500ms, election_timeout: 1s, leader_lease_timeout: 250ms,
        commit_timeout: 50ms, snapshot_threshold: 8192, snapshot_interval: 2m, trailing_logs: 10240, max_append_entries: 64,
        grace: 2s, batch_apply: true, log_cache: 1024, no_freelist_sync: true, max_batch: 64 }
cluster:
  bootstrap: true
  candidates:
    - { machine: node-a, url: "http://127.0.0.1:31413", raft: "127.0.0.1:31412" }
    - { machine: node-b, url: "http://127.0.0.1:31423/", raft: "127.0.0.1:31422" }
    - { machine: node-c, url: "HTTP://LOCALHOST:31433", raft: "localhost:31432" }
tokens: { file: /tmp/elanous-a/tokens.json }
ports: { reserved: [31413, 31414], test: { start: 31450, end: 31499 }, offline: { start: 31500, end: 31509 } }
log: { level: debug, format: json, access: true }
tls: { allow_plaintext: false, verify_incoming_api: false }
`

// FuzzLoad loads a fuzzed elanous.yaml under fuzzed ELANOUS_* variables (one
// KEY=value per line) and validates the result. Neither may panic, a list
// given in the environment is decoded strictly, and what Validate accepts
// can be served:
//   - node.id names one of the candidates, whose machines, normalized URLs
//     and Raft addresses are unique;
//   - every listen and advertise address is host:port with a port of
//     1-65535, advertised hosts are dialable, every URL is an http(s) origin;
//   - hashicorp/raft accepts the Raft configuration the node would build and
//     bootstraps a cluster of the candidates (in memory);
//   - the replicated candidate directory takes every candidate, and the
//     state machine takes a port lease drawn from ports.test;
//   - the abuse limits are numbers the API's limiters understand.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(loopbackYAML), "")
	for _, name := range []string{"node-a.yaml", "examples/node-b.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "deploy", name))
		if err != nil {
			f.Fatalf("read a deploy config: %v", err)
		}
		f.Add(data, "")
	}
	envs := []string{
		"ELANOUS_HTTP_ADDR=127.0.0.1:1\nELANOUS_NODE_ID=node-b\nELANOUS_RAFT_ADVERTISE=127.0.0.1:31422\nELANOUS_HTTP_ADVERTISE=http://127.0.0.1:31423",
		`ELANOUS_CLUSTER_CANDIDATES=[{"machine":"node-a","url":"http://127.0.0.1:31413","raft":"127.0.0.1:31412"}]`,
		"ELANOUS_PORTS_RESERVED=31413, 31414\nELANOUS_PORTS_TEST_START=1\nELANOUS_PORTS_TEST_END=65535\nELANOUS_PORTS_OFFLINE_START=0",
		"ELANOUS_PORTS_RESERVED=[31413]\nELANOUS_RAFT_ELECTION_TIMEOUT=5ms\nELANOUS_RAFT_HEARTBEAT_TIMEOUT=5ms\nELANOUS_RAFT_LEADER_LEASE_TIMEOUT=5ms",
		"ELANOUS_RAFT_MAX_APPEND_ENTRIES=1024\nELANOUS_RAFT_SNAPSHOT_THRESHOLD=-1\nELANOUS_RAFT_GRACE=-1s\nELANOUS_LOG_LEVEL=WARN",
		"ELANOUS_TLS_ALLOW_PLAINTEXT=true\nELANOUS_HTTP_ADDR=0.0.0.0:31413\nELANOUS_RAFT_ADDR=[::]:31412",
		"ELANOUS_TLS_CA_FILE=/ca.pem\nELANOUS_TLS_CERT_FILE=/c.pem\nELANOUS_TLS_KEY_FILE=/k.pem\nELANOUS_TLS_VERIFY_INCOMING_API=1",
		"ELANOUS_CLUSTER_BOOTSTRAP=maybe\nELANOUS_HTTP_METRICS_AUTH=yes\nELANOUS_UNKNOWN=1\nPATH=/bin",
		"ELANOUS_LIMITS_WRITE_RATE=0\nELANOUS_LIMITS_WRITE_BURST=0\nELANOUS_LIMITS_CONNECTIONS_PER_ADDRESS=99999",
		"ELANOUS_LIMITS_WRITE_RATE=+Inf\nELANOUS_LIMITS_ANONYMOUS_WAIT=5m",
	}
	for _, env := range envs {
		f.Add([]byte(loopbackYAML), env)
	}
	for _, y := range []string{
		"", "node: node-a", "node: { id: [a, b] }", "cluster: { candidates: {} }", "ports: { reserved: 31413 }",
		"raft: { heartbeat_timeout: 1 }", "raft: { snapshot_threshold: 1e30 }", "raft: { max_append_entries: 9223372036854775808 }",
		"a: &x { b: *x }", "node: { <<: { id: node-b } }", "? [a, b]\n: c", "1: 2", "node: { id: !!binary bm9kZS1h }",
		"cluster:\n  candidates:\n    - [node-a, http://127.0.0.1:1, 127.0.0.1:2]",
		"limits: { write_rate: 0.5, write_burst: 1, anonymous_wait: 1s }", "limits: { write_rate: .inf }", "log: { audit_file: /dev/stderr }", "---\n---", "{", "\t", "node:\n  id: node-a\n  id: node-b",
	} {
		f.Add([]byte(y), "")
	}

	f.Fuzz(func(t *testing.T, yaml []byte, env string) {
		path := filepath.Join(t.TempDir(), "elanous.yaml")
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		vars := strings.Split(env, "\n")
		c, err := Load(LoadOptions{File: path, Env: vars})
		if err != nil {
			return
		}
		// The candidates variable is decoded strictly: one JSON array.
		candidates := ""
		for _, kv := range vars {
			if v, ok := strings.CutPrefix(kv, EnvVar(candidatesKey)+"="); ok {
				candidates = v
			}
		}
		if candidates != "" && !json.Valid([]byte(candidates)) {
			t.Fatalf("Load() accepted %s=%s, which is not one JSON value", EnvVar(candidatesKey), candidates)
		}
		if c.Validate() != nil {
			return
		}
		assertServable(t, c)
	})
}

// assertServable checks that a configuration Validate accepted can be served.
func assertServable(t *testing.T, c Config) {
	t.Helper()
	self, ok := c.Self()
	if !ok {
		t.Fatalf("Validate() accepted node.id %q, which is not a candidate", c.Node.ID)
	}
	if self.Raft != c.Raft.Advertise {
		t.Fatalf("Validate() accepted raft.advertise %q beside the candidate's %q", c.Raft.Advertise, self.Raft)
	}
	port := func(key, addr string, advertised bool) {
		t.Helper()
		host, p, err := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(p)
		if err != nil || perr != nil || n < 1 || n > 65535 {
			t.Fatalf("Validate() accepted %s %q, which is not host:port with a port of 1-65535", key, addr)
		}
		if ip := net.ParseIP(strings.Trim(host, "[]")); advertised && (host == "" || ip != nil && ip.IsUnspecified()) {
			t.Fatalf("Validate() accepted %s %q, which no other machine can dial", key, addr)
		}
	}
	port("http.addr", c.HTTP.Addr, false)
	port("raft.addr", c.Raft.BindAddr(), false)
	port("raft.advertise", c.Raft.Advertise, true)
	if _, err := wire.ParseOrigin(c.HTTP.Advertise); err != nil {
		t.Fatalf("Validate() accepted http.advertise %q: %v", c.HTTP.Advertise, err)
	}
	if !c.TLS.Enabled() && !c.TLS.AllowPlaintext {
		for key, addr := range map[string]string{"http.addr": c.HTTP.Addr, "raft.addr": c.Raft.BindAddr()} {
			if host, _, _ := net.SplitHostPort(addr); !loopback(host) {
				t.Fatalf("Validate() accepted %s %q beyond loopback without TLS", key, addr)
			}
		}
	}

	// The state machine: the candidate directory takes every candidate
	// (its URL normalized), and a lease drawn from ports.test is valid.
	machines, urls, rafts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	f := fsm.New()
	index := uint64(0)
	apply := func(cmd fsm.Command) any {
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		index++
		return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
	}
	apply(fsm.SetFormat{Level: 2})
	var servers []raft.Server
	for i, cand := range c.Cluster.Candidates {
		origin, err := wire.ParseOrigin(cand.URL)
		if err != nil {
			t.Fatalf("Validate() accepted candidate %d's url %q: %v", i, cand.URL, err)
		}
		port("a candidate's raft", cand.Raft, true)
		if machines[cand.Machine] || urls[origin] || rafts[cand.Raft] {
			t.Fatalf("Validate() accepted a duplicate candidate %d: %+v", i, cand)
		}
		machines[cand.Machine], urls[origin], rafts[cand.Raft] = true, true, true
		if err, _ := apply(fsm.PutCandidate{Candidate: fsm.Candidate{Machine: cand.Machine, URL: origin, Raft: cand.Raft, Voter: true}}).(error); err != nil {
			t.Fatalf("the candidate directory refuses candidate %d %+v, which Validate accepted: %v", i, cand, err)
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(cand.Machine), Address: raft.ServerAddress(cand.Raft)})
	}
	acquire := fsm.AcquireLease{Caller: fsm.Caller{Owner: "a000000000000000"}, LeaseID: "l", Machine: "m", Purpose: "p", TTLMs: 1000,
		BandStart: c.Ports.Test.Start, BandEnd: c.Ports.Test.End}
	if err := acquire.Validate(); err != nil {
		t.Fatalf("the state machine refuses a lease from ports.test %+v, which Validate accepted: %v", c.Ports.Test, err)
	}

	// The abuse limits are numbers the API's limiters understand: a write
	// rate of 0 (off) or above, bursts of at least one write.
	if l := c.Limits; math.IsNaN(l.WriteRate) || l.WriteRate < 0 || l.WriteRate > 0 && l.WriteBurst < 1 ||
		l.Connections < 1 || l.ConnectionsPerAddress < 1 || l.BlockingQueries < 1 || l.BlockingQueriesPerAddress < 1 ||
		l.ForwardConnections < 1 || l.AnonymousWaitMs.Duration() < time.Second {
		t.Fatalf("Validate() accepted the limits %+v", l)
	}

	// Raft: the configuration the node builds (see cluster.New) validates,
	// and the candidates bootstrap a cluster.
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.Node.ID)
	rc.HeartbeatTimeout, rc.ElectionTimeout = c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout
	rc.LeaderLeaseTimeout, rc.CommitTimeout = c.Raft.LeaderLeaseTimeout, c.Raft.CommitTimeout
	rc.SnapshotThreshold, rc.SnapshotInterval = c.Raft.SnapshotThreshold, c.Raft.SnapshotInterval
	rc.TrailingLogs, rc.MaxAppendEntries, rc.BatchApplyCh = c.Raft.TrailingLogs, c.Raft.MaxAppendEntries, c.Raft.BatchApply
	if err := raft.ValidateConfig(rc); err != nil {
		t.Fatalf("raft refuses the configuration Validate accepted: %v", err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(self.Raft))
	defer trans.Close()
	store := raft.NewInmemStore()
	if err := raft.BootstrapCluster(rc, store, store, raft.NewInmemSnapshotStore(), trans, raft.Configuration{Servers: servers}); err != nil {
		t.Fatalf("raft cannot bootstrap the candidates Validate accepted: %v", err)
	}
}
