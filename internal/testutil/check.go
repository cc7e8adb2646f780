package testutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/elanous/elanous-node/wire"
)

// StrictUnmarshal decodes data into v, refusing unknown fields and anything
// after the JSON value.
func StrictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Decode decodes r's body into T strictly: an unknown field or trailing data
// fails the test, proving the server speaks the wire types.
func Decode[T any](t testing.TB, r Reply) T {
	t.Helper()
	var v T
	if err := StrictUnmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
	return v
}

// WantStatus fails the test unless r has status want.
func WantStatus(t testing.TB, what string, r Reply, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status = %s, want %d", what, r, want)
	}
}

// CheckError reports what is wrong with an error answer: it must be JSON
// {error, message} with a non-empty code and message (and, when code is set,
// that code); a 401 must carry WWW-Authenticate: Bearer; a 503 must carry
// Retry-After.
func CheckError(r Reply, code string) error {
	if r.Status < 400 {
		return fmt.Errorf("status %d is not an error", r.Status)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fmt.Errorf("Content-Type = %q, want application/json", r.Header.Get("Content-Type"))
	}
	var e wire.Error
	if err := StrictUnmarshal(r.Body, &e); err != nil {
		return fmt.Errorf("error body %q is not {error, message}: %w", r.Body, err)
	}
	if e.Error == "" {
		return fmt.Errorf("error body %q has an empty code", r.Body)
	}
	if e.Message == "" {
		return fmt.Errorf("error body %q has an empty message", r.Body)
	}
	if code != "" && e.Error != code {
		return fmt.Errorf("error code = %q, want %q (body %s)", e.Error, code, r.Body)
	}
	if r.Status == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
		return fmt.Errorf("401 WWW-Authenticate = %q, want Bearer …", r.Header.Get("WWW-Authenticate"))
	}
	if r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		return errors.New("503 without Retry-After")
	}
	return nil
}

// WantError fails the test unless r has status and a well-formed error body
// of code (any code when code is "").
func WantError(t testing.TB, what string, r Reply, status int, code string) {
	t.Helper()
	WantStatus(t, what, r, status)
	if err := CheckError(r, code); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
