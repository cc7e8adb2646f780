package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/abuse"
	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/scripts/chaos/netns"
	"github.com/elanous/elanous-node/wire"
)

// abuseRSSLimit bounds every node's resident memory while it is abused. A
// node of this cluster idles at about 30 MiB; the abuser's records are
// bounded by its quota, its connections and blocking queries by the
// per-address caps.
const abuseRSSLimit = 200 << 20

// abuseQuota is the resources-per-machine quota the scenario sets through
// PUT /v1/cluster/limits before the abuse, so that the abuser reaches it
// within a short run (the default, 1024, takes it about 11 s at the write
// rate limit).
const abuseQuota = 300

// abuseAttrs is the size of the attrs of each abusive registration. The
// workload's readers list the whole resource table with consistent reads
// several times a second; at the 15 KiB a member may send they would move
// 4.5 MB per read and become the heaviest client of the run themselves.
const abuseAttrs = 4 << 10

// abuseFaults runs the abuse scenario's clients (package abuse) beside the
// workload: well-behaved members from the harness's address, an abusive
// machine token and a client with no token each from an address of their
// own. It records a violation for everything the members lost, every answer
// an abuser must not get, a limit that never bit, and a node whose RSS went
// past abuseRSSLimit.
func abuseFaults(ctx context.Context, e *env) error {
	if e.net == nil {
		return errors.New("the abuse scenario runs on the namespace network")
	}
	abuser, anonymous := netns.ClientIP(0), netns.ClientIP(1)
	for _, ip := range []string{abuser, anonymous} {
		if err := e.net.AddHostAddress(ip); err != nil {
			return err
		}
	}
	var targets []string
	for _, n := range e.c.Nodes {
		targets = append(targets, n.URL)
	}

	maxRSS := make([]int64, len(e.c.Nodes))
	sctx, stopSampling := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for i := range e.c.Nodes {
				if rss, err := e.c.RSS(i); err == nil {
					maxRSS[i] = max(maxRSS[i], rss)
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	e.logf("abusers from %s (machine token) and %s (no token), members from %s", abuser, anonymous, netns.HostIP)
	rep, err := abuse.Run(ctx, abuse.Config{
		Targets: targets, AdminToken: e.c.Tokens.Admin,
		MemberAddr: netns.HostIP, AbuserAddr: abuser, AnonymousAddr: anonymous,
		Quota: &wire.Limits{ResourcesPerMachine: abuseQuota}, AttrsBytes: abuseAttrs, Logf: e.logf,
	})
	stopSampling()
	wg.Wait()
	if err != nil {
		e.violate("abuse-setup", err.Error())
		return err
	}
	for _, line := range rep.Summary() {
		e.logf("%s", line)
	}
	for _, v := range rep.Violations() {
		e.violate("abuse", v)
	}
	for i, rss := range maxRSS {
		e.logf("%s: highest RSS %d MiB (bound %d MiB)", e.c.Nodes[i].Name, rss>>20, abuseRSSLimit>>20)
		if rss > abuseRSSLimit {
			e.violate("rss", fmt.Sprintf("%s reached an RSS of %d MiB, over the bound of %d MiB", e.c.Nodes[i].Name, rss>>20, abuseRSSLimit>>20))
		}
	}
	return ctx.Err()
}

// violate records a violation found by a scenario's faults.
func (e *env) violate(kind, detail string) {
	e.mu.Lock()
	e.violations = append(e.violations, check.Violation{Kind: kind, Detail: detail})
	e.mu.Unlock()
	e.logf("violation: %s: %s", kind, detail)
}
