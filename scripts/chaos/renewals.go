package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/scripts/chaos/harness"
)

// renewers is the number of renewal members a scenario with renewals runs
// (each a record and a lease on a 4 s TTL).
const renewers = 3

// renewalCounts sums what the nodes counted of renewals
// (elanous_renewals_total{outcome}, elanous_confirm_rounds_total{side}) and
// what the clients saw: acknowledged renewals answered with X-Elanous-Index
// (written) and without (covered, from confirmed state), the renewal
// members' apart. A node's counters start again at each of its restarts, so
// the nodes' sums cover their last incarnations only.
func renewalCounts(ctx context.Context, c *harness.Cluster, h []check.Op) string {
	nodes := map[string]float64{}
	for i := range c.Nodes {
		mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		text, err := c.Metrics(mctx, i)
		cancel()
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "elanous_renewals_total{") && !strings.HasPrefix(line, "elanous_confirm_rounds_total{") {
				continue
			}
			sp := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[sp+1:], 64)
			if err != nil {
				continue
			}
			nodes[line[:sp]] += v
		}
	}
	var members, others [2]int // [covered, written]
	for _, o := range h {
		if o.Outcome != check.OK || (o.Kind != check.LeaseRenew && o.Kind != check.RenewHeartbeat) {
			continue
		}
		side := &others
		if o.Renewer {
			side = &members
		}
		if o.Wrote {
			side[1]++
		} else {
			side[0]++
		}
	}
	n := func(k string) int { return int(nodes[k]) }
	return fmt.Sprintf("renewals acknowledged: members %d covered + %d written, lease clients %d covered + %d written; "+
		"nodes' elanous_renewals_total: covered %d, written %d, refused %d, forwarded %d; confirm rounds: leader %d, follower %d",
		members[0], members[1], others[0], others[1],
		n(`elanous_renewals_total{outcome="covered"}`), n(`elanous_renewals_total{outcome="written"}`),
		n(`elanous_renewals_total{outcome="refused"}`), n(`elanous_renewals_total{outcome="forwarded"}`),
		n(`elanous_confirm_rounds_total{side="leader"}`), n(`elanous_confirm_rounds_total{side="follower"}`))
}
