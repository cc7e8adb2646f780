package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/elanous/elanous-node/wire"
	"github.com/google/btree"
	"github.com/hashicorp/raft"
)

var _ raft.FSM = (*FSM)(nil)

// Apply applies one committed log entry. raft calls it from a single goroutine.
// It returns the command's result (a Resource, PortLease, MemberToken, Primary
// or SweepResult) or an error from errors.go. An error changes no record and
// wakes no watcher; the cluster time (LastNow) still advances to the command's
// clamped now, as it does for every applied entry, except for a malformed body
// or a refused claim, which leave it as it was.
//
// It panics on a command type it does not know unless SkipBit is set: a
// replica that cannot apply the log must stop rather than diverge.
func (f *FSM) Apply(l *raft.Log) any {
	cmd, known, err := Decode(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index > f.applied {
		f.applied = l.Index
	}
	if !known {
		if len(l.Data) > 0 && CommandType(l.Data[0])&SkipBit != 0 {
			return nil
		}
		t := -1
		if len(l.Data) > 0 {
			t = int(l.Data[0])
		}
		panic(fmt.Sprintf("fsm: unknown command type %d at index %d: this binary is older than the cluster's log", t, l.Index))
	}
	if err != nil {
		return err
	}
	var fx effects
	result := applyOne(commandTable, f.st, cmd, l.Term, l.Index, &fx)
	for t := range fx.touched {
		if fx.touched[t] {
			f.touchLocked(Table(t), l.Index)
		}
	}
	f.ring.push(fx.events)
	return result
}

// applyOne applies a decoded command to st at (term, index), moves the
// cluster time and records the tables it changed and its events in fx. The table is a
// parameter (always commandTable) because the batch spec inside it applies
// commands through applyOne: a direct reference would be an initialization
// cycle.
func applyOne(table map[CommandType]commandSpec, st *state, cmd Command, term, index uint64, fx *effects) any {
	sp := table[cmd.Type()]
	// a.now starts at lastNow: a claim that fails validation must leave the
	// cluster time where it was (a zero a.now would reset lastNow to 0 and the
	// next claim would rebase every TTL by the whole Unix epoch). Every other
	// command's time is clamped to at least lastNow.
	a := applier{table: table, st: st, term: term, index: index, now: st.lastNow}
	if !sp.ownClock {
		a.now = max(cmd.header().Now, st.lastNow)
	}
	var result any
	if err := a.authorized(cmd); err != nil {
		result = err
	} else {
		result = sp.apply(&a, cmd)
	}
	// Time moves with every applied command, failed ones included (records do
	// not change, but lastNow does): within a generation a.now >= lastNow, and
	// only a successful claim may move it back.
	st.lastNow = a.now
	for t := range a.touched {
		fx.touched[t] = fx.touched[t] || a.touched[t]
	}
	fx.events = append(fx.events, a.events...)
	return result
}

// batch applies each command of a Batch in order, as its own command at the
// batch's term and index: its own time (clamped to at least the batch's),
// its own result. A command
// that does not decode, that a batch may not hold, or a second acquire gets
// an ErrInvalidCommand result and changes nothing; the others go on.
func (a *applier) batch(b Batch) any {
	// Every command runs at least at the batch's time, which the leader
	// stamps when it forms the batch, after each command was stamped.
	a.st.lastNow = a.now
	res := BatchResult{Results: make([]any, len(b.Commands))}
	acquires := 0
	for i, item := range b.Commands {
		if err := batchable(a.table, item.Type); err != nil {
			res.Results[i] = err
			continue
		}
		cmd, err := a.table[item.Type].decode(item.Body)
		if err != nil {
			res.Results[i] = err
			continue
		}
		if item.Type == AcquireLeaseType {
			if acquires++; acquires > 1 {
				res.Results[i] = fmt.Errorf("%w: a batch holds at most one acquire", ErrInvalidCommand)
				continue
			}
		}
		res.Results[i] = applyOne(a.table, a.st, cmd, a.term, a.index, &a.effects)
	}
	a.now = a.st.lastNow
	return res
}

// authorized refuses (format 2) a command whose machine token was revoked or
// re-issued since the API authenticated it: the command names the token's
// SHA-256, and the machine's token must still be that one.
func (a *applier) authorized(cmd Command) error {
	cc, ok := cmd.(callerCommand)
	if !ok || a.st.format < 2 {
		return nil
	}
	c := cc.caller()
	if c.Machine == "" {
		return nil
	}
	if t, ok := a.st.tokens[c.Machine]; !ok || c.TokenSHA256 == "" || t.SHA256 != c.TokenSHA256 {
		return fmt.Errorf("%w: machine %q", ErrTokenRevoked, c.Machine)
	}
	return nil
}

// setFormat raises the format level to c.Level, which this build must know.
func (a *applier) setFormat(c SetFormat) any {
	if c.Level <= a.st.format || c.Level > MaxFormat {
		return fmt.Errorf("%w: format %d (the cluster is at %d, this build knows up to %d)", ErrInvalidCommand, c.Level, a.st.format, MaxFormat)
	}
	from := a.st.format
	a.st.format = c.Level
	if from < TimelineFormat && c.Level >= TimelineFormat {
		a.seedTimeline()
	}
	return nil
}

// applier applies one command to st at (term, index) with the clamped time now.
type applier struct {
	table map[CommandType]commandSpec
	st    *state
	term  uint64
	index uint64
	now   int64
	effects
}

// effects are what applying a command did besides its result: the tables it
// changed (their watchers wake) and its events (see events.go).
type effects struct {
	touched [numTables]bool
	events  []Event
}

// live reports whether a record expiring at expiresAt is still live at a.now.
func (a *applier) live(expiresAt int64) bool { return expiresAt > a.now }

// claim sets the generation and rebases every TTL onto the new leader's clock:
// a record with remaining = expiresAt − lastNow > 0 gets now + remaining +
// grace, anything already due becomes due at now.
func (a *applier) claim(c ClaimPrimary) any {
	if !wire.ValidCandidate(c.Holder) || c.GraceMs < 0 {
		return fmt.Errorf("%w: claim by %q with grace %d", ErrInvalidCommand, c.Holder, c.GraceMs)
	}
	a.now = c.Now
	last := a.st.lastNow
	rebase := func(expiresAt int64) int64 {
		if remaining := expiresAt - last; remaining > 0 {
			return c.Now + remaining + c.GraceMs
		}
		return c.Now
	}
	// Rebasing is monotonic, so the trees keep their order; each record is
	// rewritten (records are immutable once stored) and the indexes rebuilt.
	rebased := btree.NewG(btreeDegree, lessRecord)
	a.st.resources.Ascend(func(r *record) bool {
		c := *r
		c.expiresAt = rebase(c.expiresAt)
		rebased.ReplaceOrInsert(&c)
		a.touched[TableResources] = true
		return true
	})
	a.st.resources = rebased
	for port, l := range a.st.leases {
		l.ExpiresAt = rebase(l.ExpiresAt)
		a.st.leases[port] = l
		a.touched[TableLeases] = true
	}
	for k, rec := range a.st.idem {
		rec.Until = rebase(rec.Until)
		a.st.idem[k] = rec
	}
	a.st.rebuildIndexes()
	a.st.primary = Primary{Holder: c.Holder, Generation: a.term, ClaimedAt: c.Now, Index: a.index}
	a.emit(Event{Topic: TopicPrimary, Primary: &PrimaryEvent{Primary: a.st.primary, FromNow: last, GraceMs: c.GraceMs}})
	a.addTimeline(TimelineEntry{Kind: TimelinePrimary, Generation: a.term, Holder: c.Holder})
	return a.st.primary
}

func (a *applier) register(c RegisterResource) any {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Caller.Machine != "" && c.Caller.Machine != c.Machine {
		return fmt.Errorf("%w: token of machine %q cannot register for %q", ErrForbidden, c.Caller.Machine, c.Machine)
	}
	registeredAt := a.now
	old, exists := a.st.resource(c.ID)
	if exists && a.live(old.expiresAt) {
		if m := old.machine(); c.Caller.Machine != "" && m != c.Caller.Machine {
			return fmt.Errorf("%w: resource %q belongs to machine %q", ErrForbidden, c.ID, m)
		}
		registeredAt = old.registeredAt
	}
	if a.st.format >= 2 {
		if err := checkMachineID(c.ID, c.Kind, c.Machine); err != nil {
			return err
		}
		if err := a.resourceQuota(c.Machine, old, exists); err != nil {
			return err
		}
	}
	attrs, err := encodeAttrs(c.Attrs)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	r := newRecord(&Resource{
		ID: c.ID, Kind: c.Kind, Name: c.Name, Machine: c.Machine, Owner: c.Caller.Owner,
		Endpoint: c.Endpoint, ObservedAt: c.ObservedAt, TTLMs: c.TTLMs,
		RegisteredAt: registeredAt, RenewedAt: a.now, ExpiresAt: a.now + c.TTLMs, Revision: a.index,
	}, attrs)
	a.st.putResource(r)
	a.emitResource(r)
	return r.resource()
}

// checkMachineID enforces (format 2) that a machine's record is the one id
// "machine:<machine>": kind machine has exactly that id, and an id of that
// form belongs to kind machine of that machine. Without it a member could
// register another machine's id and keep it alive (id squatting).
func checkMachineID(id, kind, machine string) error {
	name, isMachineID := strings.CutPrefix(id, "machine:")
	switch {
	case kind == "machine" && (!isMachineID || name != machine):
		return fmt.Errorf("%w: a machine resource has the id \"machine:%s\", not %q", ErrInvalidCommand, machine, id)
	case isMachineID && kind != "machine":
		return fmt.Errorf("%w: the id %q is a machine's; kind %q cannot use it", ErrInvalidCommand, id, kind)
	}
	return nil
}

// resourceQuota refuses (format 2) a register that would add a resource past
// the machine's or the cluster's limit. Replacing a record of the same
// machine adds nothing.
func (a *applier) resourceQuota(machine string, old *record, exists bool) error {
	if exists && old.machine() == machine {
		return nil
	}
	lim := a.st.limits.EffectiveLimits()
	if n := a.st.resourcesPerMachine(machine); n >= lim.ResourcesPerMachine {
		return fmt.Errorf("%w: machine %q already has %d resources (limit resourcesPerMachine %d)", ErrQuotaExceeded, machine, n, lim.ResourcesPerMachine)
	}
	if n := a.st.resources.Len(); !exists && n >= lim.Resources {
		return fmt.Errorf("%w: the cluster holds %d resources (limit resources %d)", ErrQuotaExceeded, n, lim.Resources)
	}
	return nil
}

// liveResource finds a live resource the caller may change.
func (a *applier) liveResource(id string, caller Caller) (*record, error) {
	r, ok := a.st.resource(id)
	if !ok || !a.live(r.expiresAt) {
		return nil, fmt.Errorf("resource %q: %w", id, ErrNotFound)
	}
	if m := r.machine(); caller.Machine != "" && m != caller.Machine {
		return nil, fmt.Errorf("%w: resource %q belongs to machine %q", ErrForbidden, id, m)
	}
	return r, nil
}

func (a *applier) heartbeat(c HeartbeatResource) any {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := a.checkSlack(c.SlackMs); err != nil {
		return err
	}
	old, err := a.liveResource(c.ID, c.Caller)
	if err != nil {
		return err
	}
	renewed := *old // shares the text: the attrs are unchanged
	r := &renewed
	if len(c.Attrs) > 0 {
		merged := decodeAttrs(old.attrs())
		maps.Copy(merged, c.Attrs)
		if err := ValidateAttrs(merged); err != nil {
			return err
		}
		attrs, err := encodeAttrs(merged)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidCommand, err)
		}
		r = old.withAttrs(attrs)
	}
	r.renewedAt = a.now
	r.expiresAt = a.renewedExpiry(r.expiresAt, r.ttlMs, c.SlackMs)
	r.revision = a.index
	a.st.putResource(r)
	a.emitResource(r)
	return r.resource()
}

func (a *applier) deleteResource(c DeleteResource) any {
	if err := ValidateResourceID(c.ID); err != nil {
		return err
	}
	if _, err := a.liveResource(c.ID, c.Caller); err != nil {
		return err
	}
	a.st.deleteResource(c.ID)
	a.emit(Event{Topic: TopicResources, Op: OpDelete, ID: c.ID, Reason: ReasonDeleted})
	return nil
}

func (a *applier) acquire(c AcquireLease) any {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Caller.Machine != "" && c.Caller.Machine != c.Machine {
		return fmt.Errorf("%w: token of machine %q cannot lease for %q", ErrForbidden, c.Caller.Machine, c.Machine)
	}
	if c.IdempotencyKey != "" {
		if rec, ok := a.st.idem[idemKey(c.Caller.Owner, c.IdempotencyKey)]; ok && a.now < rec.Until {
			if l, ok := a.st.leases[rec.Port]; ok && a.live(l.ExpiresAt) && l.LeaseID == rec.LeaseID {
				return a.replayed(l)
			}
			return fmt.Errorf("%w: lease %s on port %d", ErrIdempotencyKeyUsed, rec.LeaseID, rec.Port)
		}
		// No live memory of the key: its retention has passed (the record
		// is pruned by the next Sweep) while the lease it granted, with a
		// TTL longer than the retention, is still live. Each lease carries
		// the key it was granted under, so a retry still finds its own
		// lease: the lowest such port of the band.
		for _, port := range a.st.leaseByKey[idemKey(c.Caller.Owner, c.IdempotencyKey)] {
			if l := a.st.leases[port]; port >= c.BandStart && port <= c.BandEnd && a.live(l.ExpiresAt) {
				return a.replayed(l)
			}
		}
	}
	port, ok := a.freePort(c)
	if !ok {
		return fmt.Errorf("%w: no free port in %d-%d", ErrBandExhausted, c.BandStart, c.BandEnd)
	}
	if a.st.format >= 2 {
		held := a.st.leasePerMachine[c.Machine]
		if old, ok := a.st.leases[port]; ok && old.Machine == c.Machine {
			held-- // the due lease this grant replaces
		}
		if limit := a.st.limits.leasesPerMachine(c.BandStart, c.BandEnd); held >= limit {
			return fmt.Errorf("%w: machine %q holds %d port leases (limit leasesPerMachine %d)", ErrQuotaExceeded, c.Machine, held, limit)
		}
	}
	ttl := min(c.TTLMs, wire.MaxLeaseTTLMs)
	l := PortLease{
		ID: fmt.Sprintf("port-lease:%d", port), Port: port, LeaseID: c.LeaseID,
		Machine: c.Machine, Purpose: c.Purpose, Owner: c.Caller.Owner, TTLMs: ttl,
		GrantedAt: a.now, RenewedAt: a.now, ExpiresAt: a.now + ttl,
		Generation: a.term, Fence: a.index, IdempotencyKey: c.IdempotencyKey,
	}
	a.st.putLease(l)
	if c.IdempotencyKey != "" {
		k := idemKey(c.Caller.Owner, c.IdempotencyKey)
		a.st.putIdem(idemRecord{Key: k, Port: port, LeaseID: c.LeaseID, Until: a.now + IdempotencyRetentionMs})
		if a.st.format >= 2 {
			// Bounded memory: past the limit the keys that end first go first.
			for limit := a.st.limits.EffectiveLimits().IdempotencyKeys; len(a.st.idem) > limit; {
				e, _ := a.st.idemExpiry.Min()
				a.st.deleteIdem(e.key)
			}
		}
	}
	a.emitLease(l)
	return l
}

// replayed is the answer to an acquire that its Idempotency-Key matched to
// the live lease l. From format 2 on the replay renews l, as a heartbeat
// would: the retry's caller counts its TTL from the retry, and it may have
// been sent long after the grant (the first attempt timed out), so answering
// l as it was would let the lease expire up to a TTL before the holder
// expects (the fault suite's disk-full scenario found it: a retry through a
// slow follower answered a lease that ran out 0.7 s before the holder's
// TTL). At format 1 the replay changes nothing, as the first release did.
func (a *applier) replayed(l PortLease) PortLease {
	if a.st.format < 2 {
		return l
	}
	l.RenewedAt = a.now
	l.ExpiresAt = a.renewedExpiry(l.ExpiresAt, l.TTLMs, 0)
	a.st.putLease(l)
	a.emitLease(l)
	return l
}

// renewedExpiry is the expiry of a record renewed at a.now with TTL ttl and
// the command's slack. Up to format 2 it is now + ttl, as the first releases
// computed it (a slack an older leader could not have sent is ignored). From
// format 3 it is now + ttl + min(slack, ttl), and never earlier than the
// record's expiry: a renewal answered from the state without an entry
// promised that expiry, and no later entry may take it back
// (ARCHITECTURE.md, "Renewals").
func (a *applier) renewedExpiry(old, ttl, slack int64) int64 {
	if a.st.format < 3 {
		return a.now + ttl
	}
	return max(old, a.now+ttl+min(max(slack, 0), ttl))
}

// checkSlack refuses (format 3) a negative renewal slack. Earlier formats
// ignore the field, as the builds that wrote them did.
func (a *applier) checkSlack(slack int64) error {
	if a.st.format >= 3 && slack < 0 {
		return fmt.Errorf("%w: slackMs %d is negative", ErrInvalidCommand, slack)
	}
	return nil
}

// freePort picks the lowest port of the command's band that is not excluded
// and holds no live lease (a due lease that no Sweep has removed yet is
// replaced). When no lease is due, the port bitmap answers in a few word
// operations; otherwise the band is walked port by port, as rarely happens
// between an expiry and its Sweep.
func (a *applier) freePort(c AcquireLease) (int, bool) {
	excluded := make(map[int]bool, len(c.Excluded))
	for _, p := range c.Excluded {
		excluded[p] = true
	}
	if !a.st.anyLeaseDue(a.now) {
		for p := a.st.occupied.nextFree(c.BandStart, c.BandEnd); p >= 0; p = a.st.occupied.nextFree(p+1, c.BandEnd) {
			if !excluded[p] {
				return p, true
			}
		}
		return 0, false
	}
	for port := c.BandStart; port <= c.BandEnd; port++ {
		if excluded[port] {
			continue
		}
		if old, ok := a.st.leases[port]; ok && a.live(old.ExpiresAt) {
			continue
		}
		return port, true
	}
	return 0, false
}

// heldLease finds the live lease on port held under leaseID by the caller
// (any owner for an admin). Checks: 404 not live, 403 owner, 409 lease id.
func (a *applier) heldLease(port int, leaseID string, caller Caller) (PortLease, error) {
	l, ok := a.st.leases[port]
	if !ok || !a.live(l.ExpiresAt) {
		return PortLease{}, fmt.Errorf("lease on port %d: %w", port, ErrNotFound)
	}
	// Owner before lease id: a client whose port was re-granted to someone
	// else gets 403 (which the TypeScript client's release tolerates), and
	// 409 means "you own this port, under another lease id".
	if !caller.Admin && (l.Owner != caller.Owner || (caller.Machine != "" && l.Machine != caller.Machine)) {
		return PortLease{}, fmt.Errorf("%w: lease on port %d has another owner", ErrForbidden, port)
	}
	if l.LeaseID != leaseID {
		return PortLease{}, fmt.Errorf("port %d: %w", port, ErrLeaseMismatch)
	}
	return l, nil
}

func (a *applier) renew(c RenewLease) any {
	// Renewal is the owner's alone: an admin token gets no bypass here.
	c.Caller.Admin = false
	if err := a.checkSlack(c.SlackMs); err != nil {
		return err
	}
	l, err := a.heldLease(c.Port, c.LeaseID, c.Caller)
	if err != nil {
		return err
	}
	l.RenewedAt = a.now
	l.ExpiresAt = a.renewedExpiry(l.ExpiresAt, l.TTLMs, c.SlackMs)
	a.st.putLease(l)
	a.emitLease(l)
	return l
}

func (a *applier) release(c ReleaseLease) any {
	if _, err := a.heldLease(c.Port, c.LeaseID, c.Caller); err != nil {
		return err
	}
	a.st.deleteLease(c.Port)
	a.emit(Event{Topic: TopicLeases, Op: OpDelete, Port: c.Port, Reason: ReasonReleased})
	return nil
}

func (a *applier) issueToken(c IssueToken) any {
	if !wire.ValidMachine(c.Machine) || !wire.ValidSHA256(c.SHA256) {
		return fmt.Errorf("%w: token for machine %q", ErrInvalidCommand, c.Machine)
	}
	if other, ok := a.st.byHash[c.SHA256]; ok && other != c.Machine {
		return fmt.Errorf("%w: token hash already issued", ErrInvalidCommand)
	}
	t := MemberToken{
		Machine:  c.Machine,
		SHA256:   c.SHA256,
		IssuedAt: time.UnixMilli(a.now).UTC().Format("2006-01-02T15:04:05.000Z"),
	}
	a.st.putToken(t)
	a.emit(Event{Topic: TopicTokens, Op: OpPut, Machine: t.Machine, IssuedAt: t.IssuedAt})
	return t
}

func (a *applier) revokeToken(c RevokeToken) any {
	if _, ok := a.st.tokens[c.Machine]; !ok {
		return fmt.Errorf("token of machine %q: %w", c.Machine, ErrNotFound)
	}
	a.st.deleteToken(c.Machine)
	a.emit(Event{Topic: TopicTokens, Op: OpDelete, Machine: c.Machine})
	return nil
}

// sweep expires every record due at a.now, walking the expiry indexes from
// their earliest entry: O(k log n) for k due records.
func (a *applier) sweep(Sweep) any {
	res := SweepResult{Resources: []string{}, Leases: []int{}}
	for _, id := range a.st.dueResources(a.now) {
		a.st.deleteResource(id)
		res.Resources = append(res.Resources, id)
		a.emit(Event{Topic: TopicResources, Op: OpDelete, ID: id, Reason: ReasonExpired})
	}
	for _, e := range due(a.st.leaseExpiry, a.now) {
		a.st.deleteLease(e.port)
		res.Leases = append(res.Leases, e.port)
		a.emit(Event{Topic: TopicLeases, Op: OpDelete, Port: e.port, Reason: ReasonExpired})
	}
	for _, e := range due(a.st.idemExpiry, a.now) {
		a.st.deleteIdem(e.key)
	}
	slices.Sort(res.Resources)
	slices.Sort(res.Leases)
	return res
}

// putCandidate adds or updates an entry of the candidate directory (format 2).
func (a *applier) putCandidate(c PutCandidate) any {
	if a.st.format < 2 {
		return fmt.Errorf("%w: the candidate directory needs format 2 (the cluster is at %d)", ErrInvalidCommand, a.st.format)
	}
	cand := c.Candidate
	if err := validCandidate(cand); err != nil {
		return err
	}
	old, exists := a.st.candidates[cand.Machine]
	if exists {
		cand.AddedAt = old.AddedAt
	} else {
		cand.AddedAt = a.now
	}
	a.st.candidates[cand.Machine] = cand
	a.emit(Event{Topic: TopicCandidates, Op: OpPut, Machine: cand.Machine, Candidate: &cand})
	if kind := candidateChange(old, exists, cand); kind != "" {
		a.addTimeline(TimelineEntry{Kind: kind, Machine: cand.Machine, Voter: cand.Voter})
	}
	return cand
}

// validCandidate checks a directory entry: a candidate name, a URL that is
// an origin already in normal form, and a raft host:port.
func validCandidate(c Candidate) error {
	if !wire.ValidCandidate(c.Machine) {
		return fmt.Errorf("%w: candidate %q must match %s", ErrInvalidCommand, c.Machine, wire.CandidatePatternText)
	}
	if origin, err := wire.ParseOrigin(c.URL); err != nil || origin != c.URL {
		return fmt.Errorf("%w: candidate url %q must be an http(s) origin in normal form", ErrInvalidCommand, c.URL)
	}
	if host, _, err := wire.SplitHostPort(c.Raft); err != nil || host == "" {
		return fmt.Errorf("%w: candidate raft address %q must be host:port", ErrInvalidCommand, c.Raft)
	}
	return nil
}

// removeCandidate removes an entry of the candidate directory (format 2).
func (a *applier) removeCandidate(c RemoveCandidate) any {
	if a.st.format < 2 {
		return fmt.Errorf("%w: the candidate directory needs format 2 (the cluster is at %d)", ErrInvalidCommand, a.st.format)
	}
	if _, ok := a.st.candidates[c.Machine]; !ok {
		return fmt.Errorf("candidate %q: %w", c.Machine, ErrNotFound)
	}
	delete(a.st.candidates, c.Machine)
	a.emit(Event{Topic: TopicCandidates, Op: OpDelete, Machine: c.Machine})
	a.addTimeline(TimelineEntry{Kind: TimelineCandidateRemoved, Machine: c.Machine})
	return nil
}

// setLimits replaces the abuse limits (format 2). A limit below what the
// state holds already refuses new records; it removes nothing.
func (a *applier) setLimits(c SetLimits) any {
	if a.st.format < 2 {
		return fmt.Errorf("%w: limits need format 2 (the cluster is at %d)", ErrInvalidCommand, a.st.format)
	}
	l := c.Limits
	if l.ResourcesPerMachine < 0 || l.LeasesPerMachine < 0 || l.Resources < 0 || l.IdempotencyKeys < 0 {
		return fmt.Errorf("%w: limits must not be negative: %+v", ErrInvalidCommand, l)
	}
	a.st.limits = l
	eff := l.EffectiveLimits()
	a.emit(Event{Topic: TopicLimits, Limits: &eff})
	return eff
}
