package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/elanous/elanous-node/fsm"
	"github.com/elanous/elanous-node/wire"
	"github.com/labstack/echo/v4"
)

// prepareRead runs the read protocol before a handler reads table locally:
// a blocking query (?index=N&wait=D) waits for the table's index to pass N,
// then ?consistent=true makes the read linearizable (on a follower the
// request is forwarded: errForwarded, the answer is written). Last it sets
// the read headers.
func (s *Server) prepareRead(c echo.Context, table fsm.Table) error {
	if err := s.block(c, table); err != nil {
		return err
	}
	if consistent, err := boolParam(c, "consistent"); err != nil {
		return err
	} else if consistent {
		if err := s.onLeader(c, s.node.ReadIndex); err != nil {
			return err
		}
	}
	s.readHeaders(c, table)
	return nil
}

func boolParam(c echo.Context, name string) (bool, error) {
	v := c.QueryParam(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(fmt.Sprintf("query parameter %s must be true or false", name))
	}
	return b, nil
}

// block waits while the table's index is not above ?index (the index the
// caller has seen). A wait longer than the request's cap (waitCapKey: an
// anonymous /v1/primary query) is shortened to it. A query that must wait
// takes a slot of the node's blocking-query caps, overall and for its
// address; with none left it is answered 429 rate-limited at once, and the
// connection is closed.
func (s *Server) block(c echo.Context, table fsm.Table) error {
	raw := c.QueryParam("index")
	if raw == "" {
		return nil
	}
	seen, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return badRequest("query parameter index must be a non-negative integer")
	}
	wait := wire.MaxBlockingWait
	if w := c.QueryParam("wait"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			ms, errMs := strconv.ParseInt(w, 10, 64)
			if errMs != nil {
				return badRequest("query parameter wait must be a duration like 30s")
			}
			d = time.Duration(ms) * time.Millisecond
		}
		if d < 0 || d > wire.MaxBlockingWait {
			return badRequest("query parameter wait must be between 0 and 5m")
		}
		wait = d
	}
	if limit, ok := c.Get(waitCapKey).(time.Duration); ok && wait > limit {
		wait = limit
	}
	if index, _ := s.node.FSM().Watch(table); index > seen || wait == 0 {
		return nil
	}
	release, err := s.blockingSlot(c, "too many blocking queries wait on this node (or from this address); retry later")
	if err != nil {
		return err
	}
	if table == fsm.TablePrimary && s.parking.Load().park(c, seen, wait, release) {
		return errParked
	}
	defer release()
	// A long wait outlives the server's write timeout: extend it for this request.
	_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Now().Add(wait + 10*time.Second))
	timer := time.NewTimer(wait)
	defer timer.Stop()
	ctx := c.Request().Context()
	for {
		index, ch := s.node.FSM().Watch(table)
		if index > seen {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return errClientClosed // the client left: not a server error
		}
	}
}

// readHeaders sets the headers every read carries.
func (s *Server) readHeaders(c echo.Context, table fsm.Table) {
	s.setReadHeaders(c.Response().Header(), table)
}

// setReadHeaders sets the read headers in h.
func (s *Server) setReadHeaders(h http.Header, table fsm.Table) {
	f := s.node.FSM()
	// The index first: a body read after it is at least as new, so a blocking
	// query from this index never misses a change the body lacks.
	h.Set(wire.HeaderIndex, strconv.FormatUint(f.Index(table), 10))
	h.Set(wire.HeaderGeneration, strconv.FormatUint(f.Primary().Generation, 10))
	_, known := s.node.Leader()
	h.Set(wire.HeaderKnownLeader, strconv.FormatBool(known))
	h.Set(wire.HeaderLastContactMs, strconv.FormatInt(lastContactMs(s.node.LastContact()), 10))
}

func lastContactMs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// waitCapKey holds a request's cap on its blocking wait, when it has one.
const waitCapKey = "elanous.waitcap"
