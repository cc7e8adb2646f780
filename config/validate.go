package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// Limits on Raft timing, from hashicorp/raft's ValidateConfig.
const (
	minRaftTimeout   = 5 * time.Millisecond
	minCommitTimeout = time.Millisecond
	maxAppendEntries = 1024
)

// candidatesKey is the key of the candidate list, the prefix of its problems.
const candidatesKey = "cluster.candidates"

// validAddr checks a host:port address with a port of 1-65535. With
// advertise set the host must be one another machine can dial: not empty and
// not an unspecified address such as 0.0.0.0.
func validAddr(s string, advertise bool) error {
	host, _, err := wire.SplitHostPort(s)
	if err != nil {
		return err
	}
	if advertise {
		if err := advertisable(host); err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
	}
	return nil
}

// advertisable reports why host cannot be given to other machines to dial, if it cannot.
func advertisable(host string) error {
	if host == "" {
		return errors.New("host must not be empty")
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("unspecified address %s cannot be advertised", host)
	}
	return nil
}

// advertisedURL validates a URL other machines use and returns it normalized.
func advertisedURL(s string) (string, error) {
	norm, err := wire.ParseOrigin(s)
	if err != nil {
		return "", err
	}
	u, _ := url.Parse(norm)
	if err := advertisable(u.Hostname()); err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return norm, nil
}

// problems collects Validate's findings, each prefixed with the key it is about.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

func (p *problems) addErr(key string, err error) {
	*p = append(*p, fmt.Errorf("%s: %w", key, err))
}

// Validate checks c as a whole and returns every problem found, joined with
// errors.Join, each message starting with the key it is about; nil means c
// can be served. It checks names, addresses and URLs, the candidate list
// (no duplicates; non-empty and naming this node unless cluster.bootstrap is
// false; this node's entry consistent with its advertise addresses), Raft
// timing (hashicorp/raft's rules), port bands and log settings, and the local
// abuse limits (limits.*).
func (c Config) Validate() error {
	var p problems
	c.validateNode(&p)
	c.validateHTTP(&p)
	c.validateRaft(&p)
	c.validateCluster(&p)
	c.validatePorts(&p)
	c.validateLog(&p)
	c.validateTLS(&p)
	c.validateLimits(&p)
	c.validateTTL(&p)
	return errors.Join(p...)
}

func (c Config) validateTTL(p *problems) {
	if s := c.TTL.RenewSlack; !(s >= 0 && s <= 1) {
		p.add("ttl.renew_slack", "%v must be a fraction of the TTL from 0 (every renewal a log entry) to 1", s)
	}
	if c.TTL.RenewSlackMax <= 0 {
		p.add("ttl.renew_slack_max", "%v must be positive", c.TTL.RenewSlackMax)
	}
}

func (c Config) validateNode(p *problems) {
	if !wire.ValidCandidate(c.Node.ID) {
		p.add("node.id", "%q must match %s", c.Node.ID, wire.CandidatePatternText)
	}
	if strings.TrimSpace(c.Node.DataDir) == "" {
		p.add("node.data_dir", "must not be empty")
	}
}

func (c Config) validateHTTP(p *problems) {
	if err := validAddr(c.HTTP.Addr, false); err != nil {
		p.addErr("http.addr", err)
	}
	if _, err := advertisedURL(c.HTTP.Advertise); err != nil {
		p.addErr("http.advertise", err)
	}
}

func (c Config) validateRaft(p *problems) {
	r := c.Raft
	if err := validAddr(r.BindAddr(), false); err != nil {
		p.addErr("raft.addr", err)
	}
	if err := validAddr(r.Advertise, true); err != nil {
		p.addErr("raft.advertise", err)
	}
	atLeast := func(key string, d, least time.Duration) bool {
		if d < least {
			p.add(key, "must be at least %s (got %s)", least, d)
			return false
		}
		return true
	}
	hbOK := atLeast("raft.heartbeat_timeout", r.HeartbeatTimeout, minRaftTimeout)
	elOK := atLeast("raft.election_timeout", r.ElectionTimeout, minRaftTimeout)
	llOK := atLeast("raft.leader_lease_timeout", r.LeaderLeaseTimeout, minRaftTimeout)
	atLeast("raft.commit_timeout", r.CommitTimeout, minCommitTimeout)
	atLeast("raft.snapshot_interval", r.SnapshotInterval, minRaftTimeout)
	if llOK && hbOK && r.LeaderLeaseTimeout > r.HeartbeatTimeout {
		p.add("raft.leader_lease_timeout", "%s must not exceed raft.heartbeat_timeout %s", r.LeaderLeaseTimeout, r.HeartbeatTimeout)
	}
	if elOK && hbOK && r.ElectionTimeout < r.HeartbeatTimeout {
		p.add("raft.election_timeout", "%s must be at least raft.heartbeat_timeout %s", r.ElectionTimeout, r.HeartbeatTimeout)
	}
	if r.SnapshotThreshold == 0 {
		p.add("raft.snapshot_threshold", "must be greater than 0")
	}
	if r.TrailingLogs == 0 {
		p.add("raft.trailing_logs", "must be greater than 0")
	}
	if r.MaxAppendEntries < 1 || r.MaxAppendEntries > maxAppendEntries {
		p.add("raft.max_append_entries", "must be 1-%d (got %d)", maxAppendEntries, r.MaxAppendEntries)
	}
	if r.LogCache < 0 {
		p.add("raft.log_cache", "must not be negative (got %d); 0 keeps no cache", r.LogCache)
	}
	if r.MaxBatch < 1 || r.MaxBatch > 1024 {
		p.add("raft.max_batch", "must be 1-1024 (got %d); 1 turns group commit off", r.MaxBatch)
	}
	if r.Grace < 0 {
		p.add("raft.grace", "must not be negative (got %s); 0 means twice raft.election_timeout", r.Grace)
	}
}

func (c Config) validateCluster(p *problems) {
	cands := c.Cluster.Candidates
	if len(cands) == 0 {
		if c.Cluster.Bootstrap {
			p.add(candidatesKey, "must list at least one candidate (this node included); a node that joins a running cluster sets cluster.bootstrap: false")
		}
		return
	}
	machines := make(map[string]int)
	urls := make(map[string]int)
	rafts := make(map[string]int)
	for i, cand := range cands {
		key := fmt.Sprintf("%s[%d]", candidatesKey, i)
		if !wire.ValidCandidate(cand.Machine) {
			p.add(key+".machine", "%q must match %s", cand.Machine, wire.CandidatePatternText)
		} else if j, dup := machines[cand.Machine]; dup {
			p.add(key+".machine", "duplicate machine %q (also %s[%d])", cand.Machine, candidatesKey, j)
		} else {
			machines[cand.Machine] = i
		}
		if norm, err := advertisedURL(cand.URL); err != nil {
			p.addErr(key+".url", err)
		} else if j, dup := urls[norm]; dup {
			p.add(key+".url", "duplicate url %q (also %s[%d])", norm, candidatesKey, j)
		} else {
			urls[norm] = i
		}
		if err := validAddr(cand.Raft, true); err != nil {
			p.addErr(key+".raft", err)
		} else if j, dup := rafts[cand.Raft]; dup {
			p.add(key+".raft", "duplicate raft address %q (also %s[%d])", cand.Raft, candidatesKey, j)
		} else {
			rafts[cand.Raft] = i
		}
	}
	self, ok := c.Self()
	if !ok {
		// A node that waits to be added (bootstrap off) need not list
		// itself: it is added with peers add, and its own entry is its
		// advertise addresses.
		if c.Cluster.Bootstrap {
			p.add(candidatesKey, "node.id %q is not among the candidates (a node that joins a running cluster sets cluster.bootstrap: false)", c.Node.ID)
		}
		return
	}
	// This node's entry is what the other candidates and members use to reach
	// it, so it must say the same as its own advertise settings.
	selfURL, err1 := wire.ParseOrigin(self.URL)
	advURL, err2 := wire.ParseOrigin(c.HTTP.Advertise)
	if err1 == nil && err2 == nil && selfURL != advURL {
		p.add("http.advertise", "%q differs from this node's candidate url %q (node.id %q)", c.HTTP.Advertise, self.URL, c.Node.ID)
	}
	if self.Raft != c.Raft.Advertise {
		p.add("raft.advertise", "%q differs from this node's candidate raft address %q (node.id %q)", c.Raft.Advertise, self.Raft, c.Node.ID)
	}
}

func (c Config) validatePorts(p *problems) {
	pp := c.Ports
	testOK := validBand(p, "ports.test", pp.Test)
	offOK := validBand(p, "ports.offline", pp.Offline)
	if testOK && offOK && pp.Test.Start <= pp.Offline.End && pp.Offline.Start <= pp.Test.End {
		p.add("ports.offline", "%d-%d overlaps ports.test %d-%d", pp.Offline.Start, pp.Offline.End, pp.Test.Start, pp.Test.End)
	}
	for i, port := range pp.Reserved {
		key := fmt.Sprintf("ports.reserved[%d]", i)
		switch {
		case !wire.ValidPort(port):
			p.add(key, "port %d must be 1-65535", port)
		case testOK && pp.Test.Contains(port):
			p.add(key, "port %d lies in ports.test %d-%d", port, pp.Test.Start, pp.Test.End)
		case offOK && pp.Offline.Contains(port):
			p.add(key, "port %d lies in ports.offline %d-%d", port, pp.Offline.Start, pp.Offline.End)
		}
	}
}

// validBand reports a band's problems under key and whether it is usable.
func validBand(p *problems, key string, b Band) bool {
	ok := true
	if !wire.ValidPort(b.Start) {
		p.add(key+".start", "port %d must be 1-65535", b.Start)
		ok = false
	}
	if !wire.ValidPort(b.End) {
		p.add(key+".end", "port %d must be 1-65535", b.End)
		ok = false
	}
	if ok && b.Start > b.End {
		p.add(key, "start %d must not exceed end %d", b.Start, b.End)
		ok = false
	}
	return ok
}

func (c Config) validateLog(p *problems) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "%q must be one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		p.add("log.format", "%q must be one of text, json", c.Log.Format)
	}
}

// validateTLS checks that TLS, when on, is complete and the URLs are https,
// and that a node without TLS listens only on loopback unless
// tls.allow_plaintext says otherwise.
func (c Config) validateTLS(p *problems) {
	t := c.TLS
	if !t.Enabled() {
		if t.VerifyIncomingAPI {
			p.add("tls.verify_incoming_api", "needs tls.ca_file, tls.cert_file and tls.key_file")
		}
		if t.AllowPlaintext {
			return
		}
		for _, l := range []struct{ key, addr string }{{"http.addr", c.HTTP.Addr}, {"raft.addr", c.Raft.BindAddr()}} {
			if host, _, err := net.SplitHostPort(l.addr); err == nil && !loopback(host) {
				p.add(l.key, "%q listens beyond loopback but TLS is off, so tokens and Raft entries would cross the network in clear text; "+
					"set tls.ca_file, tls.cert_file and tls.key_file (see \"elanous-node tls --help\"), "+
					"or listen on 127.0.0.1, or set tls.allow_plaintext: true", l.addr)
			}
		}
		return
	}
	for _, f := range []struct{ key, val string }{{"tls.ca_file", t.CAFile}, {"tls.cert_file", t.CertFile}, {"tls.key_file", t.KeyFile}} {
		if strings.TrimSpace(f.val) == "" {
			p.add(f.key, "must be set when TLS is on (tls.ca_file, tls.cert_file and tls.key_file go together)")
		}
	}
	if u, err := url.Parse(strings.TrimSpace(c.HTTP.Advertise)); err == nil && u.Scheme == "http" {
		p.add("http.advertise", "%q must be https:// with TLS on", c.HTTP.Advertise)
	}
	for i, cand := range c.Cluster.Candidates {
		if u, err := url.Parse(strings.TrimSpace(cand.URL)); err == nil && u.Scheme == "http" {
			p.add(fmt.Sprintf("%s[%d].url", candidatesKey, i), "%q must be https:// with TLS on", cand.URL)
		}
	}
}

// loopback reports whether host is a loopback address or "localhost"; an
// empty host (every interface) is not.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
