// Package console is the web console: hand-written HTML, CSS and JS modules
// embedded in the binary and served under /ui/ by every candidate's API
// listener (ARCHITECTURE.md, "Web console"). It is read-only: the pages read
// the API with the token the user gives them; this package serves files
// only and never sees a token.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Prefix is where the console is served.
const Prefix = "/ui/"

// Views are the console's views; each path /ui/<view> answers the app, so
// deep links work. /ui/ answers it too and lands on cluster.
var Views = []string{"cluster", "fleet", "ports", "tokens", "timeline"}

// Headers are set on every console response: a Content-Security-Policy
// that allows only this origin (no inline script or style, no eval, no
// framing), no MIME sniffing and no Referer.
var Headers = map[string]string{
	"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"X-Frame-Options":         "DENY",
	"Cache-Control":           "no-cache",
}

//go:embed assets
var assets embed.FS

// file is one embedded asset with its content type and ETag.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console.
type Handler struct {
	files map[string]file // by path under Prefix: "index.html", "assets/app.js", …
}

// New returns the console's handler, the assets read once.
func New() *Handler {
	h := &Handler{files: map[string]file{}}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(p))
		if strings.HasSuffix(p, ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		h.files[p] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("console: embedded assets unreadable: " + err.Error()) // the build embeds them; unreachable
	}
	return h
}

// Size is the total size in bytes of the embedded assets.
func (h *Handler) Size() int {
	n := 0
	for _, f := range h.files {
		n += len(f.body)
	}
	return n
}

// ServeHTTP answers GET and HEAD of /ui/, /ui/<view> (the app) and
// /ui/assets/<file>; /ui redirects to /ui/. Anything else under /ui/ is 404,
// another method 405, both with the API's JSON error body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range Headers {
		w.Header().Set(k, v)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method-not-allowed", "the console answers GET and HEAD only")
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		writeError(w, http.StatusNotFound, "not-found", "no such page")
		return
	}
	name := ""
	switch {
	case rest == "" || isView(strings.TrimSuffix(rest, "/")):
		name = "assets/index.html"
	case strings.HasPrefix(rest, "assets/") && rest != "assets/index.html":
		name = rest
	}
	f, ok := h.files[name]
	if !ok {
		writeError(w, http.StatusNotFound, "not-found", "no console page "+r.URL.Path)
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	w.Header().Set("ETag", f.etag)
	if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(f.body)
	}
}

func isView(p string) bool {
	for _, v := range Views {
		if p == v {
			return true
		}
	}
	return false
}

// writeError writes the API's error body {error, message}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]string{"error": code, "message": msg}) // strings always marshal
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
