package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/api/console"
)

// reply is a recorded answer, its body read.
type reply struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64
	body          []byte
}

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) reply {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	resp := w.Result()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{StatusCode: resp.StatusCode, Header: resp.Header, ContentLength: int64(len(body)), body: body}
}

func TestConsole_ViewsAssetsAndHeaders(t *testing.T) {
	h := console.New()
	paths := []string{"/ui/", "/ui/assets/app.js", "/ui/assets/app.css", "/ui/assets/icon.svg", "/ui/nope", "/ui/assets/index.html", "/ui/assets/../console.go"}
	for _, v := range console.Views {
		paths = append(paths, "/ui/"+v, "/ui/"+v+"/")
	}
	for _, p := range paths {
		resp := get(t, h, http.MethodGet, p)
		body := resp.body
		for k, v := range console.Headers {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("GET %s: %s = %q, want %q", p, k, got, v)
			}
		}
		ct := resp.Header.Get("Content-Type")
		switch {
		case p == "/ui/" || (p != "/ui/nope" && !strings.HasPrefix(p, "/ui/assets")):
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/html") || !strings.Contains(string(body), `<main id="main"`) {
				t.Errorf("GET %s = %d %s, want the app", p, resp.StatusCode, ct)
			}
		case p == "/ui/assets/app.js":
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/javascript") {
				t.Errorf("GET %s = %d %s, want JavaScript", p, resp.StatusCode, ct)
			}
		case p == "/ui/assets/app.css" || p == "/ui/assets/icon.svg":
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s = %d", p, resp.StatusCode)
			}
		default: // an unknown page, the app under assets, a path escape
			var e struct{ Error, Message string }
			if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil || e.Error != "not-found" {
				t.Errorf("GET %s = %d %q, want 404 not-found", p, resp.StatusCode, body)
			}
		}
	}
	if resp := get(t, h, http.MethodGet, "/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get(t, h, http.MethodPost, "/ui/cluster"); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ui/cluster = %d, want 405 with Allow", resp.StatusCode)
	}
	first := get(t, h, http.MethodGet, "/ui/assets/app.js")
	etag := first.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag on an asset")
	}
	if resp := get(t, h, http.MethodGet, "/ui/assets/app.js", "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET with its ETag = %d, want 304", resp.StatusCode)
	}
	if resp := get(t, h, http.MethodHead, "/ui/fleet"); resp.StatusCode != http.StatusOK || resp.ContentLength > 0 {
		t.Errorf("HEAD /ui/fleet = %d with %d bytes", resp.StatusCode, resp.ContentLength)
	}
}

// TestConsole_NoInlineCode checks the page holds no inline script, style or
// handler, which the Content-Security-Policy would refuse, and loads nothing
// from another origin.
func TestConsole_NoInlineCode(t *testing.T) {
	page := string(get(t, console.New(), http.MethodGet, "/ui/").body)
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", " onload=", "javascript:", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	if n := console.New().Size(); n == 0 || n > 96<<10 {
		t.Errorf("assets total %d bytes, want some and at most 96 KiB", n)
	}
}
