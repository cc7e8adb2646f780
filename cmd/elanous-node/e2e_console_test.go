package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/elanous/elanous-node/api/console"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

// TestE2E_Console drives the web console in real headless Chromium against a
// real three-process cluster, the console opened on a follower: the prompt
// without a token, the token from the link's fragment, every view with
// seeded data, a machine registered through the API appearing without a
// reload, a leader SIGKILL followed on the cluster view and the timeline,
// dark mode, "Forget token", the admin-only Tokens view, the security
// headers and a 2,000-machine fleet, with no error in the page's console.
// Screenshots go to $ELANOUS_TEST_ARTIFACTS when it is set.
func TestE2E_Console(t *testing.T) {
	c := newE2ECluster(t, 3)
	for _, nd := range c.nodes {
		c.writeConfig(nd, ryWTimings) // no failover but the test's own on a loaded machine
	}
	leader, primary := c.startAll()
	var f *e2eNode
	for _, nd := range c.nodes {
		if nd != leader {
			f = nd
			break
		}
	}
	b := newBrowser(t)

	// Seed: two machines with their load, an instance with its endpoint, a
	// lease and a machine token.
	consoleRegister(t, f.url, c.tokens.Member, "alpha", 0.25)
	consoleRegister(t, f.url, c.tokens.Member, "bravo", 1.4)
	inst := map[string]any{"id": "instance:alpha/web", "kind": "instance", "name": "web", "machine": "alpha", "owner": "",
		"endpoint": "http://10.0.0.7:8080", "observedAt": time.Now().UnixMilli(), "ttlMs": 600_000}
	if _, err := testutil.DoExpect(e2eCall(http.MethodPost, f.url+"/v1/resources/register", c.tokens.Member, inst), http.StatusOK); err != nil {
		t.Fatal(err)
	}
	r, err := testutil.DoExpect(e2eCall(http.MethodPost, f.url+"/v1/leases/port", c.tokens.Member, acquireBody("alpha", "postgres")), http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	var lease wire.PortLease
	if err := json.Unmarshal(r.Body, &lease); err != nil {
		t.Fatal(err)
	}
	if _, err := testutil.DoExpect(e2eCall(http.MethodPost, f.url+"/v1/tokens/member", c.tokens.Admin, wire.IssueTokenRequest{Machine: "alpha"}), http.StatusCreated); err != nil {
		t.Fatal(err)
	}

	// The security headers, on the app and on an asset.
	for _, p := range []string{"/ui/", "/ui/fleet", "/ui/assets/app.js"} {
		r, err := testutil.DoExpect(e2eCall(http.MethodGet, f.url+p, "", nil), http.StatusOK)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
			"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
			if got := r.Header.Get(k); got != v {
				t.Errorf("GET %s: %s = %q, want %q", p, k, got, v)
			}
		}
	}

	// Without a token: the prompt, its input labelled "Token".
	b.do("open the console without a token", chromedp.Navigate(f.url+"/ui/"))
	b.waitJS("the token prompt", `!document.getElementById("prompt").hidden && document.activeElement.id === "token-input"`, consoleWait)
	if got := eval[string](b, `document.querySelector("label[for=token-input]").textContent`); got != "Token" {
		t.Errorf("the prompt's label is %q, want Token", got)
	}
	if got := eval[string](b, `location.pathname`); got != "/ui/cluster" {
		t.Errorf("/ui/ landed on %s, want /ui/cluster", got)
	}
	b.shot("console-prompt")

	// The fragment flow: the token moves into sessionStorage and leaves the
	// address bar; the cluster view shows every candidate and the primary.
	// The link comes from `elanous-node ui`, given only the follower.
	ui := exec.Command(e2eBinary(t), "ui", "--candidates", f.url)
	ui.Env = childEnv("ELANOUS_TOKEN=" + c.tokens.Query)
	out, err := ui.Output()
	if err != nil {
		t.Fatalf("elanous-node ui: %v", err)
	}
	link := strings.TrimSpace(string(out))
	if want := f.url + "/ui/cluster#token=" + c.tokens.Query; link != want {
		t.Fatalf("elanous-node ui printed %q, want %q", link, want)
	}
	b.do("open the link with the query token", chromedp.Navigate(link))
	b.waitJS("three candidates", `document.querySelectorAll("table.grid tbody tr").length === 3`, consoleWait)
	if got := eval[string](b, `location.href`); strings.Contains(got, "token") || strings.Contains(got, c.tokens.Query) {
		t.Errorf("the address bar still holds the token: %s", got)
	}
	if got := eval[string](b, `sessionStorage.getItem("elanous.token")`); got != c.tokens.Query {
		t.Errorf("sessionStorage holds %q, want the query token", got)
	}
	b.waitJS("the primary hooks", primaryHooks(primary), consoleWait)
	text := eval[string](b, `document.querySelector("main").innerText`)
	for _, want := range []string{"Viewed from " + f.id, "Leader", "Follower", "voter"} {
		if !strings.Contains(text, want) {
			t.Errorf("the cluster view does not say %q:\n%s", want, text)
		}
	}
	b.shot("console-cluster")

	// Fleet: tiles with load, memory, TTL, the instance's endpoint and the
	// lease; a machine registered now appears without a reload.
	b.do("open the fleet view", chromedp.Click(chromedp.CSS(`nav a[data-view="fleet"]`)))
	b.waitJS("two machines", `document.getElementById("fleet")?.dataset.machineCount === "2"`, consoleWait)
	alpha := eval[string](b, `document.querySelector('li.tile[data-machine="alpha"]').innerText`)
	for _, want := range []string{"alpha", "0.25", "normal", "http://10.0.0.7:8080", strconv.Itoa(lease.Port), "postgres", "GiB", "m "} {
		if !strings.Contains(alpha, want) {
			t.Errorf("alpha's tile does not show %q:\n%s", want, alpha)
		}
	}
	if got := eval[string](b, `document.querySelector('li.tile[data-machine="bravo"]').innerText`); !strings.Contains(got, "1.40") || !strings.Contains(got, "overloaded") {
		t.Errorf("bravo's tile does not show load 1.40 overloaded:\n%s", got)
	}
	consoleRegister(t, leader.url, c.tokens.Member, "charlie", 0.8)
	b.waitJS("charlie, registered through the API, without a reload", `document.getElementById("fleet").dataset.machineCount === "3" && !!document.querySelector('li.tile[data-machine="charlie"]')`, consoleWait)
	// A hidden tab reads nothing and closes the stream; back in view it
	// catches up. (The page's visibility is overridden: a headless tab is
	// always visible.)
	b.do("hide the tab", chromedp.Evaluate[chromedp.Void](`Object.defineProperty(document, "hidden", {configurable: true, get: () => true}); document.dispatchEvent(new Event("visibilitychange"))`))
	b.waitJS("the paused status", `document.getElementById("status").textContent.startsWith("Paused while the tab is hidden")`, consoleWait)
	consoleRegister(t, leader.url, c.tokens.Member, "delta", 0.1)
	b.do("show the tab", chromedp.Evaluate[chromedp.Void](`delete document.hidden; document.dispatchEvent(new Event("visibilitychange"))`))
	b.waitJS("delta, registered while hidden, once shown", `document.getElementById("fleet").dataset.machineCount === "4" && !!document.querySelector('li.tile[data-machine="delta"]')`, consoleWait)
	b.do("filter by name", chromedp.SendKeys(chromedp.CSS("#fleet-filter"), "char"))
	b.waitJS("the filter", `document.querySelectorAll("li.tile").length === 1`, consoleWait)
	b.setInput("fleet-filter", "", "input")
	b.setInput("fleet-sort", "load-desc", "change")
	b.waitJS("bravo first by load", `document.querySelector("li.tile").dataset.machine === "bravo"`, consoleWait)

	// Ports: the band as a map, the lease found by its port.
	b.do("open the ports view", chromedp.Click(chromedp.CSS(`nav a[data-view="ports"]`)))
	b.waitJS("the leased port in the map", fmt.Sprintf(`!!document.querySelector('.portmap li.leased[data-port="%d"]')`, lease.Port), consoleWait)
	b.do("find the port", chromedp.SendKeys(chromedp.CSS("#port-find"), strconv.Itoa(lease.Port)))
	b.waitJS("the port's answer", `document.querySelector(".answer").textContent.includes("leased by alpha for postgres, fence")`, consoleWait)
	b.shot("console-ports")

	// Tokens with the query token: it says an admin token is needed.
	b.do("open the tokens view", chromedp.Click(chromedp.CSS(`nav a[data-view="tokens"]`)))
	b.waitJS("the admin-needed notice", `document.querySelector(".notice.need-admin")?.textContent.includes("needs an admin token")`, consoleWait)
	b.shot("console-tokens-query")

	// Timeline: the current claim (on a node that serves the timeline;
	// otherwise the view says that it does not).
	r, err = testutil.Do(e2eCall(http.MethodGet, f.url+"/v1/cluster/timeline", c.tokens.Query, nil))
	if err != nil {
		t.Fatal(err)
	}
	var tl struct {
		Format  int `json:"format"`
		Entries []struct {
			Kind string `json:"kind"`
		} `json:"entries"`
	}
	timeline := false // the cluster keeps a timeline (format level 4 and up)
	switch r.Status {
	case http.StatusNotFound:
		t.Logf("%s answers GET /v1/cluster/timeline 404: checking the view says it is not served", f.id)
	case http.StatusOK:
		if err := json.Unmarshal(r.Body, &tl); err != nil {
			t.Fatalf("GET /v1/cluster/timeline: %v", err)
		}
		timeline = len(tl.Entries) > 0
		t.Logf("GET /v1/cluster/timeline: format %d, %d entries", tl.Format, len(tl.Entries))
	default:
		t.Fatalf("GET /v1/cluster/timeline = %d %s", r.Status, r.Body)
	}
	b.do("open the timeline", chromedp.Click(chromedp.CSS(`nav a[data-view="timeline"]`)))
	_, primary = c.waitPrimary(nil, 0, 15*time.Second)
	switch {
	case timeline:
		b.waitJS("the primary's claim on the timeline", fmt.Sprintf(`document.querySelector("ol.timeline li.entry.claim")?.dataset.generation === "%d"`, primary.Generation), consoleWait)
	case r.Status == http.StatusOK:
		b.waitJS("the empty timeline's notice", `document.querySelector(".view-timeline .notice")?.textContent.includes("No entry yet")`, consoleWait)
	default:
		b.waitJS("the timeline's absence", `document.querySelector(".view-timeline .notice")?.textContent.includes("does not serve the timeline")`, consoleWait)
	}
	if consoleServesEvents(t, f.url, c.tokens.Query) {
		b.waitJS("the live stream", `document.getElementById("status").textContent.startsWith("Live")`, consoleWait)
	} else {
		b.waitJS("polling without a stream", `document.getElementById("status").textContent.startsWith("Polling")`, consoleWait)
	}

	// A leader SIGKILL, followed live on the cluster view and the timeline.
	b.do("back to the cluster view", chromedp.Click(chromedp.CSS(`nav a[data-view="cluster"]`)))
	b.waitJS("three candidates again", `document.querySelectorAll("table.grid tbody tr").length === 3`, consoleWait)
	leader, primary = c.waitPrimary(nil, 0, 15*time.Second)
	if leader == f { // leadership moved on a loaded machine: the console moves to a follower
		for _, nd := range c.nodes {
			if nd != leader {
				f = nd
				break
			}
		}
		t.Logf("leadership moved to the console's node %s; the console moves to %s", leader.id, f.id)
		b.do("open the console on a follower", chromedp.Navigate(consoleURL(f.url, "cluster", c.tokens.Query)))
		b.waitJS("three candidates on "+f.id, `document.querySelectorAll("table.grid tbody tr").length === 3`, consoleWait)
	}
	b.waitJS("the primary before the kill", primaryHooks(primary), consoleWait)
	leader.proc.kill(t)
	newLeader, claim := c.waitPrimary(leader, primary.Generation, 15*time.Second)
	b.waitJS("the new primary on the page", primaryHooks(claim), consoleWait)
	b.waitJS("the old leader unreachable", fmt.Sprintf(`document.querySelector('tr[data-machine=%s]')?.classList.contains("down")`, jsString(leader.id)), consoleWait)
	b.shot("console-cluster-failover")
	b.do("open the timeline after the failover", chromedp.Click(chromedp.CSS(`nav a[data-view="timeline"]`)))
	if timeline {
		b.waitJS("the new claim on the timeline", fmt.Sprintf(`document.querySelector("ol.timeline li.entry.claim")?.dataset.generation === "%d"`, claim.Generation), consoleWait)
	}
	b.shot("console-timeline")

	// Dark mode: the page sets its own, dark background.
	light := eval[string](b, `getComputedStyle(document.body).backgroundColor`)
	b.colorScheme("dark")
	b.waitJS("a dark background", fmt.Sprintf(`getComputedStyle(document.body).backgroundColor !== %s`, jsString(light)), consoleWait)
	dark := eval[[]float64](b, `getComputedStyle(document.body).backgroundColor.match(/\d+/g).slice(0, 3).map(Number)`)
	if len(dark) != 3 || dark[0]+dark[1]+dark[2] > 150 {
		t.Errorf("dark mode background %v (light %s), want a dark colour", dark, light)
	}
	b.do("open the fleet in dark mode", chromedp.Click(chromedp.CSS(`nav a[data-view="fleet"]`)))
	b.waitJS("the fleet in dark mode", `document.getElementById("fleet")?.dataset.machineCount === "4"`, consoleWait)
	b.shot("console-fleet-dark")
	b.colorScheme("light")

	// Forget token: the prompt again, nothing kept.
	b.do("forget the token", chromedp.Click(chromedp.CSS("#forget")))
	b.waitJS("the prompt after Forget token", `!document.getElementById("prompt").hidden && document.getElementById("view").hidden && sessionStorage.getItem("elanous.token") === null`, consoleWait)

	// A wrong token typed in: the prompt comes back with the server's message.
	b.do("type an unknown token", chromedp.SendKeys(chromedp.CSS("#token-input"), strings.Repeat("ab", 32)), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	b.waitJS("the server's refusal", `!document.getElementById("prompt").hidden && document.getElementById("prompt-message").textContent.includes("unknown token")`, consoleWait)

	// The admin token through the prompt opens Tokens: machines and issue
	// times, never a token or a hash.
	b.do("type the admin token", chromedp.SendKeys(chromedp.CSS("#token-input"), c.tokens.Admin), chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	b.waitJS("the view after the prompt", `document.getElementById("prompt").hidden`, consoleWait)
	b.do("open the tokens view as admin", chromedp.Click(chromedp.CSS(`nav a[data-view="tokens"]`)))
	b.waitJS("alpha's token row", `[...document.querySelectorAll("table.grid tbody th")].some((th) => th.textContent === "alpha")`, consoleWait)
	b.shot("console-tokens-admin")
	page := eval[string](b, `document.documentElement.outerHTML`)
	for _, secret := range []string{c.tokens.Admin, c.tokens.Query, c.tokens.Member} {
		sum := sha256.Sum256([]byte(secret))
		if hash := hex.EncodeToString(sum[:]); strings.Contains(page, secret) || strings.Contains(page, hash[:16]) {
			t.Errorf("the page shows a cluster token or its hash")
		}
	}

	// 2,000 machines: registered through the API, rendered live.
	consoleRegisterMany(t, newLeader.url, c.tokens.Member, 2000)
	b.do("open the fleet view with 2,000 machines", chromedp.Click(chromedp.CSS(`nav a[data-view="fleet"]`)))
	start := time.Now()
	b.waitJS("2,004 machines", `document.getElementById("fleet")?.dataset.machineCount === "2004" && document.querySelectorAll("li.tile").length === 2004`, consoleWait)
	t.Logf("2,004 machines on the fleet view %s after the click (one console tick included)", time.Since(start).Round(time.Millisecond))
	b.shot("console-fleet")
	b.do("filter the big fleet", chromedp.SendKeys(chromedp.CSS("#fleet-filter"), "fleet-19"))
	b.waitJS("100 matches", `document.querySelectorAll("li.tile").length === 100`, consoleWait)

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("the page's console has %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if n := console.New().Size(); n > 96<<10 {
		t.Errorf("console assets are %d bytes, want at most 96 KiB", n)
	}
	c.checkLogs(f.proc, newLeader.proc)
}

// primaryHooks is the JavaScript condition that the page's primary element
// carries p in its data-primary-holder and data-primary-generation hooks.
func primaryHooks(p wire.Primary) string {
	return fmt.Sprintf(`document.getElementById("primary").dataset.primaryHolder === %s && document.getElementById("primary").dataset.primaryGeneration === "%d"`,
		jsString(p.Holder), p.Generation)
}

// consoleServesEvents reports whether the node at url answers GET /v1/events
// with an event stream (it reads only the headers).
func consoleServesEvents(t *testing.T, url, token string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e2eClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}
