package testutil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SSEMessage is one message of a Server-Sent Events stream, or one comment
// line (Comment set, the rest empty).
type SSEMessage struct {
	ID, Event, Data string
	Comment         string
}

// SSEStream reads a text/event-stream response on its own goroutine.
type SSEStream struct {
	Resp   *http.Response
	msgs   chan SSEMessage
	err    error // set before msgs is closed
	cancel context.CancelFunc
}

// OpenSSE sends GET url with the token (when not "") and the headers, and
// returns the response; when its status is 200 the body is read as an SSE
// stream, else it is read in full into Body. The stream is closed by
// t.Cleanup. client nil uses a client without a timeout.
func OpenSSE(t testing.TB, client *http.Client, url, token string, header map[string]string) (*SSEStream, Reply) {
	t.Helper()
	if client == nil {
		client = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", Bearer(token))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}
	}
	s := &SSEStream{Resp: resp, msgs: make(chan SSEMessage, 64), cancel: cancel}
	go s.read()
	t.Cleanup(s.Close)
	return s, Reply{Status: resp.StatusCode, Header: resp.Header}
}

func (s *SSEStream) read() {
	defer close(s.msgs)
	defer s.Resp.Body.Close()
	r := bufio.NewReaderSize(s.Resp.Body, 64<<10)
	var m SSEMessage
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if line != "" && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.err = err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if m != (SSEMessage{}) {
				s.msgs <- m
			}
			m = SSEMessage{}
		case strings.HasPrefix(line, ":"):
			s.msgs <- SSEMessage{Comment: strings.TrimSpace(line[1:])}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				m.ID = value
			case "event":
				m.Event = value
			case "data":
				if m.Data != "" {
					m.Data += "\n"
				}
				m.Data += value
			}
		}
	}
}

// ErrSSEEnded is what Next returns once the stream ended cleanly.
var ErrSSEEnded = errors.New("the event stream ended")

// Next returns the next message, an error once the stream ended (ErrSSEEnded
// for a clean end of the body), or an error after d without one.
func (s *SSEStream) Next(d time.Duration) (SSEMessage, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			if errors.Is(s.err, io.EOF) {
				return SSEMessage{}, ErrSSEEnded
			}
			return SSEMessage{}, fmt.Errorf("the event stream failed: %w", s.err)
		}
		return m, nil
	case <-timer.C:
		return SSEMessage{}, fmt.Errorf("no event within %v", d)
	}
}

// NextMessage returns the next message that is not a comment, failing the
// test when none comes within d.
func (s *SSEStream) NextMessage(t testing.TB, d time.Duration) SSEMessage {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m, err := s.Next(max(time.Until(deadline), 0))
		if err != nil {
			t.Fatalf("next event: %v", err)
		}
		if m.Comment == "" {
			return m
		}
	}
}

// Close ends the request.
func (s *SSEStream) Close() { s.cancel() }
