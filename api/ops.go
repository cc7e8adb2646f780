package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// The operations routes (docs/operations.md): snapshot save and restore,
// and leadership transfer. They are admin actions, each written to the
// audit log where its handler runs (withAudit).

// Budgets of the operations routes.
const (
	// snapshotBudget bounds GET and PUT /v1/snapshot through this node: a
	// snapshot of 100,000 resources is tens of MB, on the wire and in the
	// restore's decode, rebase and install.
	snapshotBudget = 5 * time.Minute
	// transferBudget bounds a leadership transfer: the target's catch-up,
	// its election and its claim.
	transferBudget = 10 * time.Second
)

// opsRoutes are the operations entries of the route table. The snapshot
// routes stream their bodies (a snapshot is larger than any other body),
// so they are not write routes: they forward to the leader themselves
// (snapshotOnLeader), and PUT has its own size limit, wire.MaxSnapshotBytes.
func (s *Server) opsRoutes() []route {
	return []route{
		withAudit("snapshot.save", route{method: http.MethodGet, path: "/v1/snapshot", handler: s.getSnapshot, scope: ScopeAdmin, budget: snapshotBudget}),
		withAudit("snapshot.restore", route{method: http.MethodPut, path: "/v1/snapshot", handler: answer(http.StatusOK, s.putSnapshot),
			scope: ScopeAdmin, budget: snapshotBudget}),
		withAudit("leader.transfer", route{method: http.MethodPost, path: "/v1/cluster/leader/transfer", handler: answer(http.StatusOK, s.transferLeader),
			scope: ScopeAdmin, write: true, table: fsm.TablePrimary, budget: transferBudget}),
	}
}

// getSnapshot answers a snapshot file (wire.SnapshotHeader, then the
// document) of a consistent copy of the state, taken on the leader after a
// ReadIndex: it holds every write acknowledged before the request. The copy
// costs O(1); it is encoded twice (once for the checksum in the header, once
// on the wire) while writes go on.
func (s *Server) getSnapshot(c echo.Context) error {
	if err := s.snapshotOnLeader(c); err != nil {
		return err
	}
	deadline, _ := budgetOf(c)
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	b, err := s.node.Backup(ctx)
	if err != nil {
		return err
	}
	sum := sha256.New()
	size, err := b.WriteTo(sum)
	if err != nil {
		return err
	}
	h := s.snapshotHeader(b, size, hex.EncodeToString(sum.Sum(nil)))
	auditDetail(c, slog.Uint64("index", h.Index), slog.Int64("bytes", size))
	line := h.Line()
	_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(deadline)
	hdr := c.Response().Header()
	hdr.Set("Content-Type", wire.SnapshotContentType)
	hdr.Set("Content-Length", strconv.FormatInt(int64(len(line))+size, 10))
	hdr.Set(wire.HeaderIndex, strconv.FormatUint(h.Index, 10))
	c.Response().WriteHeader(http.StatusOK)
	if _, err := c.Response().Write(line); err != nil {
		return err
	}
	if _, err := b.WriteTo(c.Response()); err != nil {
		// The status is sent: the client sees a short body (Content-Length).
		s.log.Warn("snapshot save cut short", "err", err)
	}
	return nil
}

func (s *Server) snapshotHeader(b cluster.Backup, size int64, sum string) wire.SnapshotHeader {
	counts := b.Counts()
	p := b.Primary()
	return wire.SnapshotHeader{
		Kind: wire.SnapshotKind, Container: wire.SnapshotContainer,
		Index: b.Applied(), Term: b.Term, Generation: p.Generation, Holder: p.Holder,
		FormatLevel: b.Format(), LastNow: b.LastNow(), TakenAt: time.Now().UTC().Format(time.RFC3339Nano),
		Counts: wire.SnapshotCounts{Resources: counts.Resources, Leases: counts.Leases, Tokens: counts.Tokens, Candidates: counts.Candidates},
		Size:   size, SHA256: sum, Version: s.version,
	}
}

// putSnapshot restores a snapshot file on the leader. The file is checked
// whole before anything happens: the header, the document's length and
// SHA-256, nothing after it, every record (fsm.ReadBackup), and the header's
// figures against the document's. A file that fails is 400
// invalid-snapshot and changes nothing. Then cluster.Node.Restore rebases it
// once and installs it through raft.Restore; the answer comes once a quorum
// holds it, with X-Elanous-Index the restored state's index (a follower that
// forwarded the request answers once it has installed it too).
func (s *Server) putSnapshot(c echo.Context) (res wire.RestoreResult, err error) {
	r := c.Request()
	if r.ContentLength > wire.MaxSnapshotBytes {
		return res, tooBigSnapshot()
	}
	if err := s.snapshotOnLeader(c); err != nil {
		return res, err
	}
	start := time.Now()
	deadline, _ := budgetOf(c)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	rc := http.NewResponseController(c.Response().Writer)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)

	h, backup, err := ReadSnapshotFile(http.MaxBytesReader(c.Response().Writer, r.Body, wire.MaxSnapshotBytes))
	res.Backup = h
	auditDetail(c, slog.Uint64("backup_index", h.Index), slog.String("backup_sha256", h.SHA256))
	if err != nil {
		return res, err
	}
	restored, err := s.node.Restore(ctx, backup)
	if err != nil {
		if errors.Is(err, fsm.ErrSnapshotTooNew) {
			return res, &Error{Status: http.StatusConflict, Code: wire.CodeSnapshotTooNew, Message: err.Error()}
		}
		if errors.Is(err, cluster.ErrRestoreFailed) {
			return res, &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeRestoreFailed, Message: err.Error()}
		}
		return res, err
	}
	c.Response().Header().Set(wire.HeaderIndex, strconv.FormatUint(restored.Index, 10))
	return wire.RestoreResult{
		Index: restored.Index, Generation: restored.Primary.Generation, Holder: restored.Primary.Holder,
		FormatLevel: restored.Format,
		Counts: wire.SnapshotCounts{Resources: restored.Counts.Resources, Leases: restored.Counts.Leases,
			Tokens: restored.Counts.Tokens, Candidates: restored.Counts.Candidates},
		Backup: h, TookMs: time.Since(start).Milliseconds(),
	}, nil
}

func tooBigSnapshot() *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeSnapshotTooBig,
		Message: fmt.Sprintf("a snapshot file is at most %d bytes", wire.MaxSnapshotBytes)}
}

func invalidSnapshot(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidSnapshot, Message: fmt.Sprintf(format, args...)}
}

// ReadSnapshotFile reads a snapshot file from body and checks it whole, as
// a restore does and `snapshot inspect` does offline: the header, the
// document's length and SHA-256, nothing after the document, every record
// (fsm.ReadBackup), and the header's figures against the document's. It
// returns the header it read even when a later check fails; its errors are
// *Error (400 invalid-snapshot, 413 past wire.MaxSnapshotBytes).
func ReadSnapshotFile(body io.Reader) (wire.SnapshotHeader, *fsm.Backup, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	h, err := wire.ReadSnapshotHeader(br)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return h, nil, tooBigSnapshot()
		}
		return h, nil, invalidSnapshot("%v", err)
	}
	sum := sha256.New()
	doc := &countingReader{r: io.LimitReader(br, h.Size)}
	tee := io.TeeReader(doc, sum)
	backup, decodeErr := fsm.ReadBackup(tee)
	if _, err := io.Copy(io.Discard, tee); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return h, nil, tooBigSnapshot()
		}
		return h, nil, badRequest("read the snapshot file: " + err.Error())
	}
	switch {
	case doc.n < h.Size:
		return h, nil, invalidSnapshot("the file is truncated: its document has %d of %d bytes", doc.n, h.Size)
	case hex.EncodeToString(sum.Sum(nil)) != h.SHA256:
		return h, nil, invalidSnapshot("the document's SHA-256 is not the header's: the file is corrupt")
	}
	if extra, _ := br.Peek(1); len(extra) > 0 {
		return h, nil, invalidSnapshot("the file has data after its document")
	}
	if decodeErr != nil {
		return h, nil, invalidSnapshot("%v", decodeErr)
	}
	if err := headerMatches(h, backup); err != nil {
		return h, nil, invalidSnapshot("%v", err)
	}
	return h, backup, nil
}

// headerMatches checks the header's figures against the document's: the
// header is outside the checksum.
func headerMatches(h wire.SnapshotHeader, b *fsm.Backup) error {
	counts := b.Counts()
	got := wire.SnapshotCounts{Resources: counts.Resources, Leases: counts.Leases, Tokens: counts.Tokens, Candidates: counts.Candidates}
	if h.Index != b.Applied() || h.FormatLevel != b.Version() || h.Generation != b.Primary().Generation || h.Counts != got {
		return fmt.Errorf("the header (index %d, format %d, generation %d, counts %+v) does not match the document (index %d, format %d, generation %d, counts %+v)",
			h.Index, h.FormatLevel, h.Generation, h.Counts, b.Applied(), b.Version(), b.Primary().Generation, got)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// snapshotOnLeader runs a snapshot route's leader check: nil when this node
// is the ready leader and serves the request, else the error to return —
// errForwarded once the request was forwarded to the leader with its body
// streamed through (the answer is written), or a 503 with no leader. It is
// onLeader with forwardStream for bodies too large to hold.
func (s *Server) snapshotOnLeader(c echo.Context) error {
	return s.onLeaderVia(c, s.forwardStream, func(context.Context) error { return s.leading() })
}

// forwardStream forwards the request to the leader with its body streamed
// as received and streams the answer back. A request the leader cannot have
// received whole is 503 no-leader (a restore acts only on a whole, checked
// file); one lost after it was sent whole is 503 outcome-unknown for a PUT.
// A successful restore is answered once this node has installed it.
func (s *Server) forwardStream(ctx context.Context, c echo.Context) error {
	leader, ok := s.node.Leader()
	if !ok {
		return cluster.ErrNoLeader
	}
	in := c.Request()
	if dl, ok := ctx.Deadline(); ok { // the body streams through for as long as the budget allows
		rc := http.NewResponseController(c.Response().Writer)
		_ = rc.SetReadDeadline(dl)
		_ = rc.SetWriteDeadline(dl)
	}
	var body io.Reader = http.NoBody
	if in.Method != http.MethodGet {
		body = http.MaxBytesReader(c.Response().Writer, in.Body, wire.MaxSnapshotBytes)
	}
	req, err := forwardRequest(ctx, in, body, leader, s.node.ID())
	if err != nil {
		return err
	}
	req.ContentLength = in.ContentLength
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	resp, err := s.client.Do(req)
	s.metrics.forwards.WithLabelValues(forwardResult(err)).Inc()
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return tooBigSnapshot()
		case !wrote.Load() || in.Method == http.MethodGet:
			return fmt.Errorf("%w: leader %s: %v", cluster.ErrNoLeader, leader.Machine, err)
		}
		return fmt.Errorf("%w: forward to leader %s: %v", cluster.ErrOutcomeUnknown, leader.Machine, err)
	}
	defer resp.Body.Close()
	if index, ok := writeIndex(resp); ok && in.Method == http.MethodPut {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		if err != nil {
			return fmt.Errorf("%w: read the leader's answer to a restore: %v", cluster.ErrOutcomeUnknown, err)
		}
		s.awaitApplied(ctx, index, fsm.TablePrimary)
		return copyAnswer(c, resp, bytes.NewReader(data))
	}
	return copyAnswer(c, resp, resp.Body)
}

// copyAnswer writes the leader's answer: its status, the headers a client
// reads, and body.
func copyAnswer(c echo.Context, resp *http.Response, body io.Reader) error {
	for _, h := range append([]string{"Content-Length"}, copiedHeaders...) {
		if v := resp.Header.Get(h); v != "" {
			c.Response().Header().Set(h, v)
		}
	}
	c.Response().WriteHeader(resp.StatusCode)
	_, err := io.Copy(c.Response(), body)
	return err
}

// transferLeader hands leadership to the voter the body names (or to the
// most up-to-date other one) and answers once the new leader's claim is
// applied here. The answer's X-Elanous-Index is the claim's index, so a
// follower that forwarded the request answers once it has applied it too.
func (s *Server) transferLeader(c echo.Context) (res wire.TransferResult, err error) {
	var req wire.TransferRequest
	if err := decodeStrict(c, &req, true); err != nil {
		return res, err
	}
	auditDetail(c, slog.String("to", req.To))
	if req.To != "" && !wire.ValidCandidate(req.To) {
		return res, badRequest(fmt.Sprintf("to %q is not a candidate name (%s)", req.To, wire.CandidatePatternText))
	}
	start := time.Now()
	deadline, _ := budgetOf(c)
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	p, err := s.node.TransferLeadershipTo(ctx, req.To)
	switch {
	case errors.Is(err, cluster.ErrUnknownServer):
		return res, badRequest(err.Error())
	case errors.Is(err, cluster.ErrTransferFailed):
		return res, &Error{Status: http.StatusConflict, Code: wire.CodeTransferFailed, Message: err.Error()}
	case err != nil:
		return res, err
	}
	s.wrote(c, p.Index)
	auditDetail(c, slog.String("holder", p.Holder))
	return wire.TransferResult{From: s.node.ID(), Holder: p.Holder, Generation: p.Generation, TookMs: time.Since(start).Milliseconds()}, nil
}
