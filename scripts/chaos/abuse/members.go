package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// goodMember is a well-behaved member: a machine record and an instance,
// two port leases, heartbeated and renewed every MemberEvery on MemberTTL,
// and a blocking /v1/primary watch on every node.
type goodMember struct {
	r       *run
	machine string
	token   string
	c       *http.Client
	leases  map[int]string // port → lease id
	ids     []string
	// lastOK is when each record or lease was last heartbeated or renewed.
	mu     sync.Mutex
	lastOK map[string]time.Time // guarded by mu
}

func (m *goodMember) setUp(ctx context.Context) error {
	r, ttl := m.r, m.r.cfg.MemberTTL.Milliseconds()
	m.ids = []string{"machine:" + m.machine, "instance:" + m.machine + "/1"}
	m.leases, m.lastOK = map[int]string{}, map[string]time.Time{}
	for i, id := range m.ids {
		kind := "machine"
		if i > 0 {
			kind = "instance"
		}
		body := wire.RegisterRequest{ID: id, Kind: kind, Name: m.machine, Machine: m.machine, TTLMs: ttl, Endpoint: "http://10.0.0.9:31460"}
		if _, err := r.retry(ctx, m.c, http.MethodPost, "/v1/resources/register", m.token, body, http.StatusOK); err != nil {
			return fmt.Errorf("member %s: %w", m.machine, err)
		}
		m.lastOK[id] = time.Now()
	}
	for i := range 2 {
		a, err := r.retry(ctx, m.c, http.MethodPost, "/v1/leases/port", m.token,
			wire.AcquireRequest{Machine: m.machine, Purpose: fmt.Sprintf("svc-%d", i), TTLMs: ttl}, http.StatusCreated)
		if err != nil {
			return fmt.Errorf("member %s: %w", m.machine, err)
		}
		var l wire.PortLease
		if err := json.Unmarshal(a.body, &l); err != nil {
			return err
		}
		m.leases[l.Port] = l.LeaseID
		m.lastOK[leaseKey(l.Port)] = time.Now()
		r.mu.Lock()
		r.victims = append(r.victims, victim{machine: m.machine, resource: m.ids[0], port: l.Port})
		r.mu.Unlock()
	}
	return nil
}

func leaseKey(port int) string { return "lease on port " + strconv.Itoa(port) }

// run heartbeats each record and renews each lease every MemberEvery until
// ctx ends, each in a loop of its own (as the member agent keeps each lease),
// so that one slow answer delays nothing else. An item lost stops its loop.
func (m *goodMember) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, id := range m.ids {
		wg.Go(func() {
			m.every(ctx, id, func(url string) answer {
				return do(ctx, m.c, http.MethodPost, url+"/v1/resources/"+escape(id)+"/heartbeat", m.token, nil, nil)
			})
		})
	}
	for port, leaseID := range m.leases {
		wg.Go(func() {
			m.every(ctx, leaseKey(port), func(url string) answer {
				return do(ctx, m.c, http.MethodPost, fmt.Sprintf("%s/v1/leases/port/%d/heartbeat", url, port), m.token,
					map[string]string{wire.HeaderPortLeaseID: leaseID}, nil)
			})
		})
	}
	wg.Wait()
}

// every keeps one item: a heartbeat or renewal every MemberEvery until ctx
// ends or the item is lost.
func (m *goodMember) every(ctx context.Context, what string, send func(url string) answer) {
	tick := time.NewTicker(m.r.cfg.MemberEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !m.keep(ctx, what, send) {
			return
		}
	}
}

// keep sends one heartbeat or renewal, retrying on a transport error or a
// 5xx while the TTL has not run out since the last success. A 4xx is a loss.
// It reports whether the item is still held.
func (m *goodMember) keep(ctx context.Context, what string, send func(url string) answer) bool {
	for try := 0; ctx.Err() == nil; try++ {
		start := time.Now()
		a := send(m.r.target())
		m.r.mu.Lock()
		m.r.report.MemberOps++
		if try > 0 {
			m.r.report.MemberRetries++
		}
		m.r.mu.Unlock()
		if a.err == nil && a.status == http.StatusOK {
			m.mu.Lock()
			m.lastOK[what] = time.Now()
			m.mu.Unlock()
			m.r.mu.Lock()
			m.r.report.MemberSlowest = max(m.r.report.MemberSlowest, time.Since(start))
			m.r.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return true
		}
		if a.err == nil && a.status >= 400 && a.status < 500 {
			m.lose(fmt.Sprintf("%s of %s: answered %s", what, m.machine, a.outcome()))
			return false
		}
		m.mu.Lock()
		last := m.lastOK[what]
		m.mu.Unlock()
		if time.Since(last) > m.r.cfg.MemberTTL {
			m.lose(fmt.Sprintf("%s of %s: no heartbeat or renewal succeeded within its %s TTL (last: %s)", what, m.machine, m.r.cfg.MemberTTL, a.outcome()))
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func (m *goodMember) lose(what string) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.report.Lost = append(m.r.report.Lost, what)
}

// watch follows the primary on one node with anonymous blocking queries, as
// the member agent does; a refusal is a loss (the abusers must not crowd a
// member out).
func (m *goodMember) watch(ctx context.Context, c *http.Client, url string) {
	index := "0"
	for ctx.Err() == nil {
		a := do(ctx, c, http.MethodGet, url+"/v1/primary?index="+index+"&wait=30s", "", nil, nil)
		if ctx.Err() != nil {
			return
		}
		if a.err == nil && a.status == http.StatusTooManyRequests {
			m.lose(fmt.Sprintf("/v1/primary watch of %s on %s: answered %s", m.machine, url, a.outcome()))
			return
		}
		if a.err != nil || a.status != http.StatusOK {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if a.index != "" {
			index = a.index
		}
	}
}

// verify checks, with consistent reads, that the member still holds every
// record and lease it held.
func (m *goodMember) verify(ctx context.Context) {
	for _, id := range m.ids {
		if _, err := m.r.retry(ctx, m.c, http.MethodGet, "/v1/resources/"+escape(id)+"?consistent=true", m.token, nil, http.StatusOK); err != nil {
			m.lose(fmt.Sprintf("%s at the end: %v", id, err))
		}
	}
	for port, leaseID := range m.leases {
		a, err := m.r.retry(ctx, m.c, http.MethodGet, fmt.Sprintf("/v1/leases/port/%d?consistent=true", port), m.token, nil, http.StatusOK)
		var l wire.PortLease
		if err == nil {
			err = json.Unmarshal(a.body, &l)
		}
		if err != nil || l.LeaseID != leaseID {
			m.lose(fmt.Sprintf("%s of %s at the end: %+v %v", leaseKey(port), m.machine, l, err))
		}
	}
}

func escape(id string) string {
	return strings.NewReplacer(":", "%3A", "/", "%2F").Replace(id)
}
