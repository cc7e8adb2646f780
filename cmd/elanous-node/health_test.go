package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0.0.0.0:31413", "127.0.0.1:31413"},
		{":31413", "127.0.0.1:31413"},
		{"[::]:31413", "[::1]:31413"},
		{"10.0.0.1:31413", "10.0.0.1:31413"},
		{"node-a:31413", "node-a:31413"},
	}
	for _, tt := range tests {
		if got := loopbackAddr(tt.in); got != tt.want {
			t.Errorf("loopbackAddr(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHealthCmd(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/health", r.URL.Path == "/v1/ready" && ready.Load():
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/v1/ready":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"no-leader","message":"no leader"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	if _, _, err := runRoot(t, "health", "--url", srv.URL); err != nil {
		t.Errorf("health error = %v, want nil", err)
	}
	_, _, err := runRoot(t, "health", "--ready", "--url", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "no-leader") {
		t.Errorf("health --ready before ready error = %v, want a 503 no-leader", err)
	}
	ready.Store(true)
	if _, _, err := runRoot(t, "health", "--ready", "--url", srv.URL); err != nil {
		t.Errorf("health --ready once ready error = %v, want nil", err)
	}
	srv.Close()
	if _, _, err := runRoot(t, "health", "--url", srv.URL); err == nil {
		t.Error("health against a closed port error = nil, want an error")
	}
}
