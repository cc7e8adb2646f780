package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

const bodyKey = "elanous.body"

// readBody reads the request body once (at most wire.MaxBodyBytes) and keeps
// it so a forward can send the same bytes on.
func readBody(c echo.Context) ([]byte, error) {
	if b, ok := c.Get(bodyKey).([]byte); ok {
		return b, nil
	}
	r := c.Request()
	if r.ContentLength > wire.MaxBodyBytes {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeBodyTooLarge, Message: "request body is larger than 64 KiB"}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, wire.MaxBodyBytes+1))
	if err != nil {
		return nil, badRequest("read request body: " + err.Error())
	}
	if len(body) > wire.MaxBodyBytes {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeBodyTooLarge, Message: "request body is larger than 64 KiB"}
	}
	c.Set(bodyKey, body)
	return body, nil
}

// decodeStrict decodes the body into v: unknown fields, trailing data and
// wrong types are 400. An empty body is allowed only when optional is set.
func decodeStrict(c echo.Context, v any, optional bool) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return badRequest("request body is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(describeDecodeError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("request body has trailing data after the JSON value")
	}
	return nil
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		return fmt.Sprintf("field %q must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of body"
	}
	return "malformed request body: " + err.Error()
}

// pathParam returns the named path parameter, percent-decoded. Routing uses
// the raw path, so "instance%3Ahost%2F1" stays one segment.
func pathParam(c echo.Context, name string) (string, error) {
	raw := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return raw, nil
	}
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest(fmt.Sprintf("path parameter %s is not valid percent-encoding", name))
	}
	return v, nil
}

// portParam parses the {port} parameter and checks it lies in the test band.
func (s *Server) portParam(c echo.Context) (int, error) {
	raw, err := pathParam(c, "port")
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(raw)
	if err != nil || len(raw) > 5 {
		return 0, badLease(fmt.Sprintf("port %q is not a number", raw))
	}
	if port < s.band.Start || port > s.band.End {
		return 0, badLease(fmt.Sprintf("port %d is outside the test band %d-%d", port, s.band.Start, s.band.End))
	}
	return port, nil
}

// leaseHeader returns the x-port-lease-id header, required on heartbeat and release.
func leaseHeader(c echo.Context) (string, error) {
	id := c.Request().Header.Get(wire.HeaderPortLeaseID)
	if id == "" {
		return "", badLease("missing " + wire.HeaderPortLeaseID + " header")
	}
	if len(id) > wire.MaxLeaseIDLen {
		return "", badLease(wire.HeaderPortLeaseID + " header is too long")
	}
	return id, nil
}
