package main

// Helpers of the web console's end-to-end test (e2e_console_test.go): a real
// headless Chromium driven through chromedp, the page's console collected,
// polls of JavaScript conditions with a deadline, and screenshots.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/elanous/elanous-node/internal/testutil"
)

// consoleWait bounds each wait for the page: generous, as headless Chromium
// on a loaded two-core machine can take seconds to run a module.
const consoleWait = 45 * time.Second

// browserEnv is set to 1 by scripts/test: the console test then fails when
// no Chromium is installed instead of skipping (docs/console.md).
const browserEnv = "ELANOUS_TEST_BROWSER"

// artifactsEnv names the directory the console test writes its screenshots
// to; without it they go to the test's temporary directory.
const artifactsEnv = "ELANOUS_TEST_ARTIFACTS"

// chromiumPath finds Debian's chromium (or another Chromium build on PATH).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(browserEnv) == "1" {
		t.Fatalf("%s=1 but no chromium on PATH: scripts/test installs it with apt-get install chromium", browserEnv)
	}
	t.Skipf("no chromium on PATH; install it (apt-get install chromium) or set %s=1 to make this a failure", browserEnv)
	return ""
}

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // where screenshots go

	mu       sync.Mutex
	messages []chromedp.ConsoleMessage
}

// newBrowser starts headless Chromium (no sandbox: the tests run as root)
// with a 1400×900 window, and collects the tab's console from the start.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts, chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900), chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	dir := os.Getenv(artifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, ctx: ctx, dir: dir}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.messages = append(b.messages, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls the JavaScript condition expr until it is true, up to timeout.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		b.t.Fatalf("waiting %s for %s (%s): %v\npage: %s", timeout, what, expr, err, b.pageText())
	}
}

// setInput sets the value of the control with id and fires event on it,
// as a user's edit does.
func (b *browser) setInput(id, value, event string) {
	b.t.Helper()
	b.do("set #"+id, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const el = document.getElementById(%s); el.value = %s; el.dispatchEvent(new Event(%s)); })()`,
		jsString(id), jsString(value), jsString(event))))
}

// pageText is the start of the page's text, for failure messages.
func (b *browser) pageText() string {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.pathname + "\n" + document.body.innerText`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(v) > 3000 {
		v = v[:3000] + "…"
	}
	return v
}

// shot writes a PNG of the viewport to <dir>/<name>.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// colorScheme emulates prefers-color-scheme (light or dark).
func (b *browser) colorScheme(scheme string) {
	b.t.Helper()
	_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
	if err != nil {
		b.t.Fatalf("emulate prefers-color-scheme %s: %v", scheme, err)
	}
}

// consoleErrors are the page's uncaught exceptions, console.error calls and
// browser log errors — CSP violations included — except the network log's
// "failed to load resource" lines, which every answer of 401, 403 or 404 to
// fetch() writes and which the test provokes on purpose.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.messages {
		if m.Type == chromedp.ConsoleException || (m.Type == chromedp.ConsoleError && m.Source != "network") {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line))
		}
	}
	return out
}

// consoleRegister registers a machine resource with its load (load average
// per CPU = perCPU) through url, as the member agent does.
func consoleRegister(t *testing.T, url, token, name string, perCPU float64) {
	t.Helper()
	now := time.Now().UnixMilli()
	const gib = 1 << 30
	body := map[string]any{
		"id": "machine:" + name, "kind": "machine", "name": name, "machine": name, "owner": "",
		"attrs": map[string]any{"load": map[string]any{
			"loadAvg": []float64{perCPU * 4, perCPU * 4, perCPU * 4}, "cpuCount": 4,
			"freeMem": int64(16*gib - int64(perCPU*8*gib)), "totalMem": int64(16 * gib), "observedAt": now}},
		"observedAt": now, "ttlMs": 600_000,
	}
	if _, err := testutil.DoExpect(e2eCall(http.MethodPost, url+"/v1/resources/register", token, body), http.StatusOK); err != nil {
		t.Fatalf("register machine %s: %v", name, err)
	}
}

// consoleRegisterMany registers n machines fleet-0000… with 8 writers.
func consoleRegisterMany(t *testing.T, url, token string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				now := time.Now().UnixMilli()
				name := fmt.Sprintf("fleet-%04d", i)
				per := float64(i%13) / 10
				body := map[string]any{
					"id": "machine:" + name, "kind": "machine", "name": name, "machine": name, "owner": "",
					"attrs": map[string]any{"load": map[string]any{"loadAvg": []float64{per * 8, per * 8, per * 8}, "cpuCount": 8,
						"freeMem": 20 << 30, "totalMem": 32 << 30, "observedAt": now}},
					"observedAt": now, "ttlMs": 600_000,
				}
				if _, err := testutil.DoExpect(e2eCall(http.MethodPost, url+"/v1/resources/register", token, body), http.StatusOK); err != nil {
					errs <- fmt.Errorf("register %s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
