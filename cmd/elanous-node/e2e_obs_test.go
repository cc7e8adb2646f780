package main

import (
	"encoding/json"
	"fmt"
	"github.com/elanous/elanous-node/internal/testutil"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// pendingMetrics are named by deploy/monitoring but not exported yet (none
// now: elanous_rate_limited_total{scope} came with the API's rate limits).
var pendingMetrics = map[string]bool{}

// notifySocket is a systemd notification socket: it records every datagram.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func newNotifySocket(t *testing.T, dir string) *notifySocket {
	t.Helper()
	s := &notifySocket{path: filepath.Join(dir, "notify.sock")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", s.path, err)
	}
	s.conn = conn
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return s
}

func (s *notifySocket) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// scrape fetches and parses url's /metrics.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := e2eClient.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// metricName matches the metric names the monitoring files and docs/operations.md use.
var metricName = regexp.MustCompile(`\b(?:elanous|raft|go|process)_[A-Za-z0-9_]+\b`)

// monitoringMetricNames returns every metric name deploy/monitoring's
// dashboard queries and alert rules mention, with the files that use it.
func monitoringMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	dashboard := filepath.Join("..", "..", "deploy", "monitoring", "elanous-dashboard.json")
	alerts := filepath.Join("..", "..", "deploy", "monitoring", "elanous-alerts.yaml")
	rules, err := os.ReadFile(alerts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for file, texts := range map[string][]string{dashboard: dashboardQueries(t, dashboard), alerts: {string(rules)}} {
		for _, text := range texts {
			for _, n := range metricName.FindAllString(text, -1) {
				if !slices.Contains(out[n], filepath.Base(file)) {
					out[n] = append(out[n], filepath.Base(file))
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d metric names in %s and %s", len(out), dashboard, alerts)
	}
	return out
}

// grafanaPanel is what dashboardQueries reads of a Grafana panel: a row
// holds its panels when collapsed.
type grafanaPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// dashboardQueries decodes the Grafana dashboard at path and returns its
// PromQL: every panel target's expr, and the template variables' queries
// (a string, or an object with a query, depending on Grafana's version).
// Only queries count, not descriptions that merely name a metric. Every panel
// but a row must have a query, so a dashboard the decoding misreads fails
// here rather than yielding no names.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not a JSON dashboard: %v", path, err)
	}
	var out []string
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			n := 0
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					out = append(out, tg.Expr)
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: panel %q (%s) has no query", path, p.Title, p.Type)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("%s: variable %q: query %s is neither a string nor an object with a query: %v", path, v.Name, v.Query, err)
			}
			q = obj.Query
		}
		if q == "" {
			t.Errorf("%s: query variable %q has no query", path, v.Name)
		}
		out = append(out, q)
	}
	if len(out) < 10 {
		t.Fatalf("%s: found only %d queries", path, len(out))
	}
	return out
}

// readmeMetricNames returns the elanous_* names of docs/operations.md's
// "Metrics" section: the metrics an operator is told about.
func readmeMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### Metrics\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Metrics" section`)
	}
	section, _, _ = strings.Cut(section, "\n### ")
	out := map[string]bool{}
	for _, n := range metricName.FindAllString(section, -1) {
		if strings.HasPrefix(n, "elanous_") {
			out[n] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf(`docs/operations.md's "Metrics" section names only %d elanous_* metrics`, len(out))
	}
	return out
}

// exported reports whether name is a family in mfs, or a _bucket, _count or
// _sum series of a histogram or summary family there.
func exported(mfs map[string]*dto.MetricFamily, name string) bool {
	if _, ok := mfs[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if mf, ok := mfs[base]; ok {
			t := mf.GetType()
			if t == dto.MetricType_HISTOGRAM || (suffix != "_bucket" && t == dto.MetricType_SUMMARY) {
				return true
			}
		}
	}
	return false
}

// TestE2E_Observability runs three `serve` processes with JSON logs, the
// access log and a systemd notification socket each, writes through the
// leader and a follower, and checks what an operator watches:
//   - /metrics has elanous_build_info, the propose histogram, raft's commit
//     time and per-follower replication series, and no gauge reads -1;
//   - every metric deploy/monitoring's dashboard queries and alert rules use
//     is exported (except pendingMetrics);
//   - docs/operations.md's "Metrics" section names every elanous_* family exported,
//     and every elanous_* metric it names is exported;
//   - every log line is JSON with one envelope of keys, raft's and the API's alike;
//   - each node tells systemd it is waiting, then READY=1.
func TestE2E_Observability(t *testing.T) {
	c := newE2ECluster(t, 3)
	sockets := map[string]*notifySocket{}
	for _, nd := range c.nodes {
		c.writeConfig(nd, func(doc map[string]any) {
			doc["log"] = map[string]any{"level": "info", "format": "json", "access": true}
		})
		// A unix socket path must be short; the test's temp dir may not be.
		dir, err := os.MkdirTemp("", "sd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sockets[nd.id] = newNotifySocket(t, dir)
		nd.proc = startProc(t, nd.dir, nd.id, childEnv("NOTIFY_SOCKET="+sockets[nd.id].path), "serve", "--config", nd.config)
	}
	leader, _ := c.waitPrimary(nil, 0, 20*time.Second)
	follower := c.running(leader)[0]

	// Writes through the leader and, forwarded, through a follower.
	testutil.Expect(t, e2eCall(http.MethodPost, leader.url+"/v1/resources/register", c.tokens.Member, registerBody("machine:obs-a", "obs-a")), http.StatusOK)
	testutil.Expect(t, e2eCall(http.MethodPost, follower.url+"/v1/resources/register", c.tokens.Member, registerBody("machine:obs-b", "obs-b")), http.StatusOK)
	testutil.Expect(t, e2eCall(http.MethodPost, follower.url+"/v1/leases/port", c.tokens.Member, acquireBody("obs-b", "web")), http.StatusCreated)
	// Every node has applied them (so raft's follower-side figures exist too).
	testutil.Poll(t, "every node to apply the writes", 5*time.Second, func() error {
		for _, nd := range c.nodes {
			if _, err := testutil.DoExpect(e2eCall(http.MethodGet, nd.url+"/v1/resources/machine%3Aobs-b", c.tokens.Query, nil), http.StatusOK); err != nil {
				return fmt.Errorf("%s: %v", nd.id, err)
			}
		}
		return nil
	})

	// Some of raft's figures come only with its periodic work (the leader's
	// lease check samples raft_leader_lastContact): scrape until every
	// metric the dashboard and the alert rules use is there.
	used := monitoringMetricNames(t)
	var all map[string]*dto.MetricFamily
	var byNode map[string]map[string]*dto.MetricFamily
	testutil.Poll(t, "every metric deploy/monitoring uses, exported", 10*time.Second, func() error {
		all, byNode = map[string]*dto.MetricFamily{}, map[string]map[string]*dto.MetricFamily{}
		for _, nd := range c.nodes {
			mfs, err := scrape(nd.url)
			if err != nil {
				return fmt.Errorf("scrape %s: %v", nd.id, err)
			}
			byNode[nd.id] = mfs
			for name, mf := range mfs {
				all[name] = mf
			}
		}
		var missing []string
		for name, files := range used {
			if !pendingMetrics[name] && !exported(all, name) {
				missing = append(missing, fmt.Sprintf("%s (used in %v)", name, files))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not exported by a live cluster: %v", missing)
		}
		return nil
	})
	// docs/operations.md lists every metric of ours the cluster exports, and none it
	// does not (the merged scrape has every node's, the follower-only and
	// leader-only figures included).
	documented := readmeMetricNames(t)
	for name := range all {
		if strings.HasPrefix(name, "elanous_") && !documented[name] {
			t.Errorf("%s is exported but docs/operations.md's \"Metrics\" section does not name it", name)
		}
	}
	for name := range documented {
		if !exported(all, name) {
			t.Errorf("docs/operations.md's \"Metrics\" section names %s, which the cluster does not export", name)
		}
	}
	for _, nd := range c.nodes {
		mfs := byNode[nd.id]
		// No sentinel: no gauge anywhere reads -1.
		for name, mf := range mfs {
			if mf.GetType() != dto.MetricType_GAUGE {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == -1 {
					t.Errorf("%s: gauge %s%v reads -1", nd.id, name, m.GetLabel())
				}
			}
		}
		bi, ok := mfs["elanous_build_info"]
		if !ok {
			t.Errorf("%s: no elanous_build_info", nd.id)
		} else {
			labels := map[string]string{}
			for _, l := range bi.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["version"] != version || labels["revision"] == "" || !strings.HasPrefix(labels["goversion"], "go") {
				t.Errorf("%s: elanous_build_info labels = %v, want version %q, a revision and a Go version", nd.id, labels, version)
			}
		}
	}
	lm := byNode[leader.id]
	if !exported(lm, "elanous_propose_duration_seconds_bucket") {
		t.Error("leader: no elanous_propose_duration_seconds_bucket")
	}
	if mf, ok := lm["raft_commitTime"]; !ok || mf.GetType() != dto.MetricType_SUMMARY {
		t.Errorf("leader: raft's commit time (raft_commitTime summary) missing: %v", mf)
	}
	peers := map[string]bool{}
	for _, m := range lm["raft_replication_appendEntries_rpc"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "peer_id" {
				peers[l.GetValue()] = true
			}
		}
	}
	for _, nd := range c.nodes {
		if nd != leader && !peers[nd.id] {
			t.Errorf("leader: raft_replication_appendEntries_rpc has no series for follower %s (has %v)", nd.id, peers)
		}
	}
	if _, ok := lm["elanous_raft_last_contact_seconds"]; ok {
		t.Error("leader exports elanous_raft_last_contact_seconds, want it absent where it does not apply")
	}
	if _, ok := byNode[follower.id]["elanous_raft_last_contact_seconds"]; !ok {
		t.Errorf("follower %s does not export elanous_raft_last_contact_seconds", follower.id)
	}

	// systemd: a STATUS while waiting, then READY=1, from every node.
	for id, s := range sockets {
		testutil.Poll(t, id+" READY=1", 5*time.Second, func() error {
			msgs := s.messages()
			i := slices.IndexFunc(msgs, func(m string) bool { return strings.Contains(m, "READY=1") })
			if i < 0 {
				return fmt.Errorf("notifications %q have no READY=1", msgs)
			}
			if i == 0 || !strings.HasPrefix(msgs[0], "STATUS=") {
				return fmt.Errorf("notifications %q: want a STATUS before READY=1", msgs)
			}
			return nil
		})
	}

	// Logs: every line of every node is JSON with the envelope; a raft line
	// and an access line share exactly the envelope's keys.
	for _, nd := range c.nodes {
		_, stderr := nd.proc.output()
		var raftLine, apiLine map[string]any
		for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: log line %q is not JSON: %v", nd.id, line, err)
				continue
			}
			for _, k := range logEnvelope {
				if s, _ := m[k].(string); s == "" {
					t.Errorf("%s: log line %q lacks %q", nd.id, line, k)
				}
			}
			pickLogLine(m, &raftLine, &apiLine)
		}
		if raftLine == nil || apiLine == nil {
			t.Errorf("%s: found a raft line: %v, an access line: %v; want both", nd.id, raftLine != nil, apiLine != nil)
			continue
		}
		shared := sharedKeys(raftLine, apiLine)
		if want := slices.Sorted(slices.Values(logEnvelope)); !slices.Equal(shared, want) {
			t.Errorf("%s: keys shared by a raft line %v and an access line %v = %v, want %v", nd.id,
				slices.Sorted(maps.Keys(raftLine)), slices.Sorted(maps.Keys(apiLine)), shared, want)
		}
	}
	c.checkLogs(c.nodes[0].proc, c.nodes[1].proc, c.nodes[2].proc)
}
