package main

// Acknowledged writes and the background writer the end-to-end tests use to
// prove no acknowledged write is lost across a failover.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/wire"
)

type ackedWrites struct {
	mu        sync.Mutex
	resources []string          // resource ids; guarded by mu
	leases    map[int]string    // port → lease id; guarded by mu
	via       map[string]string // resource id or "port-lease:N" → node it was written through; guarded by mu
}

func newAckedWrites() *ackedWrites {
	return &ackedWrites{leases: map[int]string{}, via: map[string]string{}}
}

func (a *ackedWrites) resource(id, via string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resources = append(a.resources, id)
	a.via[id] = via
}

// count is how many resource writes were acknowledged so far.
func (a *ackedWrites) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.resources)
}

// waitMore waits up to within for n more resource writes to be acknowledged
// than when it is called; what says when, in the wait's name.
func (a *ackedWrites) waitMore(t *testing.T, what string, n int, within time.Duration) {
	t.Helper()
	from := a.count()
	testutil.WaitFor(t, "writes acknowledged "+what, within, func() bool { return a.count() >= from+n })
}

func (a *ackedWrites) lease(l wire.PortLease, via string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leases[l.Port] = l.LeaseID
	a.via[l.ID] = via
}

// register writes a machine resource through nd and records it; it fails the test on error.
func (c *e2eCluster) register(a *ackedWrites, nd *e2eNode, id string) {
	c.t.Helper()
	res := testutil.Decode[wire.Resource](c.t, testutil.Expect(c.t,
		e2eCall(http.MethodPost, nd.url+"/v1/resources/register", c.tokens.Member, registerBody(id, "host-"+nd.id)),
		http.StatusOK))
	if res.ID != id {
		c.t.Fatalf("register %s through %s answered record %q", id, nd.id, res.ID)
	}
	a.resource(id, nd.id)
}

// acquire takes a port lease through nd and records it; it fails the test on error.
func (c *e2eCluster) acquire(a *ackedWrites, nd *e2eNode, purpose string) wire.PortLease {
	c.t.Helper()
	l := testutil.Decode[wire.PortLease](c.t, testutil.Expect(c.t,
		e2eCall(http.MethodPost, nd.url+"/v1/leases/port", c.tokens.Member, acquireBody("host-"+nd.id, purpose)),
		http.StatusCreated))
	if l.Port == 0 || l.LeaseID == "" {
		c.t.Fatalf("acquire through %s answered %+v", nd.id, l)
	}
	a.lease(l, nd.id)
	return l
}

// checkAcked polls nd's local state until every acknowledged write is there.
func (c *e2eCluster) checkAcked(a *ackedWrites, nd *e2eNode, timeout time.Duration) {
	c.t.Helper()
	a.mu.Lock()
	resources := append([]string(nil), a.resources...)
	leases := maps.Clone(a.leases)
	via := maps.Clone(a.via)
	a.mu.Unlock()
	testutil.Poll(c.t, fmt.Sprintf("%d acknowledged registrations and %d leases on %s", len(resources), len(leases), nd.id), timeout, func() error {
		list, err := queryGet[[]wire.Resource](c, nd, "/v1/resources")
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, res := range list {
			have[res.ID] = true
		}
		var missing []string
		for _, id := range resources {
			if !have[id] {
				missing = append(missing, id+" (written through "+via[id]+")")
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing resources %v", missing)
		}
		ls, err := queryGet[[]wire.PortLease](c, nd, "/v1/leases/port")
		if err != nil {
			return err
		}
		held := map[int]string{}
		for _, l := range ls {
			held[l.Port] = l.LeaseID
		}
		for port, id := range leases {
			if held[port] != id {
				return fmt.Errorf("lease on port %d is %q, want the acknowledged %q (granted through %s)",
					port, held[port], id, via[fmt.Sprintf("port-lease:%d", port)])
			}
		}
		return nil
	})
}

// writer registers resources in a loop, through each node in turn, until
// stopped; it records the acknowledged ones.
type writer struct {
	stop               chan struct{}
	done               chan struct{}
	attempts, failures int // read after done is closed
	// outcomes counts the failures by node and kind ("503 no-leader",
	// "transport"); slowest is each node's slowest failed answer. Read
	// after done is closed.
	outcomes map[string]int
	slowest  map[string]time.Duration
}

func (c *e2eCluster) startWriter(a *ackedWrites, prefix string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{}), outcomes: map[string]int{}, slowest: map[string]time.Duration{}}
	nodes := append([]*e2eNode(nil), c.nodes...)
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			nd := nodes[i%len(nodes)]
			id := fmt.Sprintf("machine:%s-%d", prefix, i)
			w.attempts++
			sent := time.Now()
			r, err := testutil.Do(e2eCall(http.MethodPost, nd.url+"/v1/resources/register", c.tokens.Member, registerBody(id, "host-bg")))
			if err != nil || r.Status != http.StatusOK {
				w.failures++ // unacknowledged: may or may not be applied
				kind := "transport error"
				if err == nil {
					var e wire.Error
					_ = json.Unmarshal(r.Body, &e)
					kind = fmt.Sprintf("%d %s", r.Status, e.Error)
				}
				w.outcomes[nd.id+": "+kind]++
				w.slowest[nd.id] = max(w.slowest[nd.id], time.Since(sent))
				if !testutil.Pause(w.stop, 10*time.Millisecond) {
					return
				}
				continue
			}
			a.resource(id, nd.id)
		}
	}()
	return w
}

func (w *writer) halt() {
	close(w.stop)
	<-w.done
}

// waitFailover polls every survivor's GET /v1/primary until each serves a
// known primary above generation gen, and returns how long after since the
// slowest one did and the new claim.
func waitFailover(t *testing.T, survivors []*e2eNode, gen uint64, since time.Time, timeout time.Duration) (time.Duration, wire.Primary) {
	t.Helper()
	served := map[string]time.Duration{}
	var claim wire.Primary
	testutil.PollEvery(t, fmt.Sprintf("every survivor serving a generation above %d", gen), timeout-time.Since(since), 5*time.Millisecond, func() error {
		for _, nd := range survivors {
			if _, ok := served[nd.id]; ok {
				continue
			}
			p, err := getPrimary(nd.url)
			if err == nil && p.Known && p.Generation > gen {
				served[nd.id] = time.Since(since)
				claim = p
			}
		}
		if len(served) < len(survivors) {
			return fmt.Errorf("only %v serve it", served)
		}
		return nil
	})
	var slowest time.Duration
	for _, d := range served {
		slowest = max(slowest, d)
	}
	t.Logf("survivors serve generation %d (holder %s) after %v", claim.Generation, claim.Holder, served)
	return slowest, claim
}

// killLeader SIGKILLs leader and waits up to 10 s for the survivors to serve
// a generation above gen (waitFailover). It logs the failover as what, fails
// the test when it took longer than maxFailover, and returns the survivors,
// the failover time and the new claim.
func (c *e2eCluster) killLeader(leader *e2eNode, gen uint64, what string) ([]*e2eNode, time.Duration, wire.Primary) {
	t := c.t
	t.Helper()
	killedAt := time.Now()
	leader.proc.kill(t)
	survivors := c.running(leader)
	failover, after := waitFailover(t, survivors, gen, killedAt, 10*time.Second)
	t.Logf("%s: %s from SIGKILL of %s to both survivors serving generation %d", what, failover.Round(time.Millisecond), leader.id, after.Generation)
	if failover > maxFailover {
		t.Errorf("%s took %s, want at most %s", what, failover, maxFailover)
	}
	return survivors, failover, after
}

// logElection logs the lines of p's output about elections, to explain a
// slow failover.
func logElection(t *testing.T, p *proc) {
	t.Helper()
	_, stderr := p.output()
	var lines []string
	for _, ln := range strings.Split(stderr, "\n") {
		l := strings.ToLower(ln)
		for _, w := range []string{"election", "candidate state", "leader state", "vote", "claim", "heartbeat timeout", "follower state"} {
			if strings.Contains(l, w) {
				lines = append(lines, ln)
				break
			}
		}
	}
	t.Logf("%s election log:\n%s", p.name, strings.Join(lines, "\n"))
}

// runServe runs `serve --config cfg`, expecting it to stop on its own within
// 15 s, and returns its combined output and exit code.
func runServe(t *testing.T, cfg string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2eBinary(t), "serve", "--config", cfg)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve --config %s was still running after 15 s (killed):\n%s", cfg, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run serve: %v", err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}
