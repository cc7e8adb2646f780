package member

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestStartHeartbeat_Validation(t *testing.T) {
	n := newFakeNet()
	c := fakeClient(t, n, tokenA, hostA)
	tests := []struct {
		name   string
		mutate func(*HeartbeatConfig)
	}{
		{"no client", func(c *HeartbeatConfig) { c.Client = nil }},
		{"negative interval", func(c *HeartbeatConfig) { c.Interval = -time.Second }},
		{"interval above 300 s", func(c *HeartbeatConfig) { c.Interval = MaxHeartbeatInterval + time.Millisecond }},
		{"no machine id", func(c *HeartbeatConfig) { c.Machine.ID = "" }},
		{"no machine name", func(c *HeartbeatConfig) { c.Machine.Name = "" }},
		{"no instance id", func(c *HeartbeatConfig) { c.Instance.ID = "" }},
		{"no endpoint", func(c *HeartbeatConfig) { c.Endpoint = "" }},
		{"attrs that do not encode", func(c *HeartbeatConfig) { c.Machine.Attrs = map[string]any{"ch": make(chan int)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testHeartbeatConfig(c, DefaultHeartbeatInterval)
			tt.mutate(&cfg)
			if hb, err := StartHeartbeat(t.Context(), cfg); err == nil {
				hb.Stop()
				t.Fatalf("StartHeartbeat() error = nil, want an error")
			}
		})
	}
	t.Run("300 s is accepted", func(t *testing.T) {
		hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, MaxHeartbeatInterval))
		hb.Stop()
	})
}

// TestHeartbeat_Bodies checks the wire shape of register and heartbeat
// requests against member.ts register() and tick().
func TestHeartbeat_Bodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, DefaultHeartbeatInterval))
		time.Sleep(31 * time.Second)
		hb.Stop()
		regs := n.requests("register")
		if len(regs) != 2 {
			t.Fatalf("registers = %v, want 2", regs)
		}
		load := `{"loadAvg":[0.5,0.25,0.125],"cpuCount":4,"freeMem":1073741824,"totalMem":4294967296,"observedAt":946684800000}`
		wantMachine := `{"id":"machine:mbp","kind":"machine","name":"mbp","machine":"mbp","owner":"",` +
			`"attrs":{"duties":["build"],"load":` + load + `},"observedAt":946684800000,"ttlMs":600000}`
		wantInstance := `{"id":"instance:mbp/1","kind":"instance","name":"nexus","machine":"mbp","owner":"",` +
			`"endpoint":"http://10.0.0.9:31414","observedAt":946684800000,"ttlMs":600000}`
		for i, want := range []string{wantMachine, wantInstance} {
			if !jsonEqual(t, regs[i].body, want) {
				t.Errorf("register body %d = %s, want %s", i, regs[i].body, want)
			}
			if regs[i].auth != "Bearer "+tokenA {
				t.Errorf("register %d Authorization = %q, want the configured token", i, regs[i].auth)
			}
		}
		hbs := n.requests("heartbeat")
		if len(hbs) != 1 {
			t.Fatalf("heartbeats = %v, want 1", hbs)
		}
		if hbs[0].path != "/v1/resources/machine%3Ambp/heartbeat" {
			t.Errorf("heartbeat path = %q, want the encodeURIComponent form", hbs[0].path)
		}
		wantHB := `{"attrs":{"load":` + strings.Replace(load, "946684800000", "946684830000", 1) + `}}`
		if !jsonEqual(t, hbs[0].body, wantHB) {
			t.Errorf("heartbeat body = %s, want %s", hbs[0].body, wantHB)
		}
	})
}

func jsonEqual(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("body %q: %v", got, err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// TestHeartbeat_InstanceRefresh mirrors member.ts
// `if (heartbeatsSinceInstanceRefresh * interval >= MAX_RETRY_MS)`: every
// tenth heartbeat at 30 s also heartbeats the instance with {}, and a 404
// there re-registers at once.
func TestHeartbeat_InstanceRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.script(hostA+" instance-heartbeat", status(200), status(404))
		hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, DefaultHeartbeatInterval))
		time.Sleep(605 * time.Second)
		hb.Stop()
		refreshes := n.requests("instance-heartbeat")
		if got, want := n.times("instance-heartbeat"), secs(300, 600); !slices.Equal(got, want) {
			t.Fatalf("instance refresh times = %v, want %v", got, want)
		}
		if refreshes[0].path != "/v1/resources/instance%3Ambp%2F1/heartbeat" || refreshes[0].body != "{}" {
			t.Errorf("instance refresh = %s %s, want the escaped id and {}", refreshes[0].path, refreshes[0].body)
		}
		if got, want := n.times("register"), secs(0, 0, 600, 600); !slices.Equal(got, want) {
			t.Errorf("register times = %v, want %v", got, want)
		}
	})
}

// TestHeartbeat_LogsReasonChanges mirrors member.ts `if (reason !==
// lastFailure) debug.log(…)`: one record per change of reason, and never a
// token in the output.
func TestHeartbeat_LogsReasonChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		n.setPrimary(hostA, primaryOf(hostA, "a", 1))
		n.script(hostA+" heartbeat", status(403), status(403), status(503), status(503), status(503), status(503),
			refused, refused, status(200), status(403))
		c := fakeClient(t, n, tokenA, hostA)
		var logs logBuffer
		cfg := testHeartbeatConfig(c, DefaultHeartbeatInterval)
		cfg.Logger = logs.logger()
		hb := mustStartHeartbeat(t, t.Context(), cfg)
		time.Sleep(30 * time.Minute)
		hb.Stop()
		var reasons []string
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec struct {
				Msg    string `json:"msg"`
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec.Msg == "member heartbeat failed" {
				reasons = append(reasons, rec.Reason)
			}
		}
		// The last 403 follows a success but member.ts never resets lastFailure
		// on success, so it is logged because the reason changed from
		// network-or-timeout, not because of the success.
		want := []string{"http-403", "http-503", "network-or-timeout", "http-403"}
		if !slices.Equal(reasons, want) {
			t.Errorf("logged reasons = %q, want %q", reasons, want)
		}
		if strings.Contains(logs.String(), tokenA) {
			t.Errorf("the token appears in the logs:\n%s", logs.String())
		}
	})
}

// TestHeartbeat_StopAbortsInFlight mirrors member.ts's stop function
// (`controller.abort()`): Stop does not wait for the 5 s request timeout.
func TestHeartbeat_StopAbortsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c := oneHostPrimaryA(t)
		n.setDefault(hostA+" heartbeat", hang)
		hb := mustStartHeartbeat(t, t.Context(), testHeartbeatConfig(c, DefaultHeartbeatInterval))
		time.Sleep(31 * time.Second)
		before := time.Now()
		hb.Stop()
		if waited := time.Since(before); waited != 0 {
			t.Errorf("Stop() waited %v, want 0 (the request is aborted)", waited)
		}
		select {
		case <-hb.Done():
		default:
			t.Errorf("Done() not closed after Stop()")
		}
		hb.Stop() // a second Stop is harmless
		time.Sleep(time.Hour)
		if got := len(n.requests("heartbeat")); got != 1 {
			t.Errorf("heartbeats = %d, want 1 (none after Stop)", got)
		}
	})
}

func TestHeartbeat_ContextCancelStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := oneHostPrimaryA(t)
		ctx, cancel := context.WithCancel(t.Context())
		hb := mustStartHeartbeat(t, ctx, testHeartbeatConfig(c, DefaultHeartbeatInterval))
		time.Sleep(40 * time.Second)
		cancel()
		synctest.Wait()
		select {
		case <-hb.Done():
		default:
			t.Fatalf("Done() not closed after the context was cancelled")
		}
	})
}

func TestHeartbeatBackoff(t *testing.T) {
	// member.ts: Math.min(MAX_RETRY_MS, Math.min(interval, DEFAULT_INTERVAL_MS) * 2 ** (failures - 1))
	tests := []struct {
		interval time.Duration
		failures int
		want     time.Duration
	}{
		{30 * time.Second, 1, 30 * time.Second},
		{30 * time.Second, 2, 60 * time.Second},
		{30 * time.Second, 4, 240 * time.Second},
		{30 * time.Second, 5, 300 * time.Second},
		{30 * time.Second, 1000, 300 * time.Second},
		{300 * time.Second, 1, 30 * time.Second},
		{time.Second, 3, 4 * time.Second},
		{time.Second, 9, 256 * time.Second},
		{time.Second, 10, 300 * time.Second},
	}
	for _, tt := range tests {
		if got := heartbeatBackoff(tt.interval, tt.failures); got != tt.want {
			t.Errorf("heartbeatBackoff(%v, %d) = %v, want %v", tt.interval, tt.failures, got, tt.want)
		}
	}
}
