package api_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elanous/elanous-node/api/apitest"
	"github.com/elanous/elanous-node/internal/testutil"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

// tokenKind is a column of the authorization matrix.
type tokenKind int

const (
	noToken tokenKind = iota
	malformedToken
	unknownToken
	queryToken
	memberToken
	machineOnOther // machine token of A acting on machine B's records
	machineOnOwn   // machine token of A acting on its own records
	adminToken
	numKinds
)

var kindNames = [numKinds]string{"no-token", "malformed", "unknown", "query", "member", "machine-A-on-B", "machine-A-on-A", "admin"}

const (
	machineA = "mach-a"
	machineB = "mach-b"
)

// authEnv is the shared cluster of the matrix and its fixtures.
type authEnv struct {
	c          *apitest.Cluster
	tokA, tokB string
	unknown    string
	seq        int
}

// cell is one request of the matrix: the Authorization header, the machine
// the request acts on and the token that created the records it touches.
type cell struct {
	kind    tokenKind
	auth    string
	machine string
	creator string
	n       int
	url     string // the node the request goes to
}

func (e *authEnv) cell(k tokenKind, url string) cell {
	e.seq++
	cl := cell{kind: k, machine: machineA, creator: e.c.Tokens.Member, n: e.seq, url: url}
	switch k {
	case malformedToken:
		// Rotate over the ways a header can be malformed; the first is 64
		// hex characters, but uppercase: the format is lowercase only.
		tok := testutil.RandomToken()
		forms := []string{"Bearer " + strings.ToUpper(tok), "Bearer " + tok[:63], "Basic " + tok, "Bearer", tok, "Bearer  " + tok, "Bearer " + tok + "0"}
		cl.auth = forms[e.seq%len(forms)]
	case unknownToken:
		cl.auth = testutil.Bearer(e.unknown)
	case queryToken:
		cl.auth = testutil.Bearer(e.c.Tokens.Query)
	case memberToken:
		cl.auth = testutil.Bearer(e.c.Tokens.Member)
	case machineOnOther:
		cl.auth, cl.machine, cl.creator = testutil.Bearer(e.tokA), machineB, e.tokB
	case machineOnOwn:
		cl.auth, cl.creator = testutil.Bearer(e.tokA), e.tokA
	case adminToken:
		cl.auth = testutil.Bearer(e.c.Tokens.Admin)
	}
	return cl
}

func (e *authEnv) leaderURL() string { return e.c.Nodes[e.c.Leader()].URL }

// resource registers a fixture resource of cl.machine created by cl.creator.
func (e *authEnv) resource(t *testing.T, cl cell) string {
	t.Helper()
	id := fmt.Sprintf("instance:%s/%d", cl.machine, cl.n)
	r := testutil.Send(t, testutil.JSONCall(http.MethodPost, e.leaderURL()+"/v1/resources/register", cl.creator, wire.RegisterRequest{
		ID: id, Kind: "instance", Name: id, Machine: cl.machine, TTLMs: memberTTL, Endpoint: "http://10.0.0.9:31460",
	}))
	testutil.WantStatus(t, "fixture register", r, http.StatusOK)
	return id
}

// lease acquires a fixture lease for cl.machine by cl.creator.
func (e *authEnv) lease(t *testing.T, cl cell) wire.PortLease {
	t.Helper()
	return acquire(t, e.leaderURL(), cl.creator, wire.AcquireRequest{Machine: cl.machine, Purpose: "matrix", TTLMs: memberTTL})
}

type endpoint struct {
	name  string
	want  [numKinds]int
	build func(t *testing.T, e *authEnv, cl cell) testutil.Call
	// check, when set, runs on a success answer.
	check func(t *testing.T, e *authEnv, cl cell, r testutil.Reply)
}

// TestServer_AuthorizationMatrix sends every endpoint of the route table (docs/http-api.md) with every
// kind of credential and checks the status; not one 2xx may be unexpected.
// Requests rotate over the three nodes, so follower-side authentication and
// forwarding are covered too.
func TestServer_AuthorizationMatrix(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	e := &authEnv{c: c, unknown: testutil.RandomToken()}
	e.tokA = issueToken(t, c, e.leaderURL(), machineA).Token
	e.tokB = issueToken(t, c, e.leaderURL(), machineB).Token

	get := func(path string) func(*testing.T, *authEnv, cell) testutil.Call {
		return func(_ *testing.T, _ *authEnv, cl cell) testutil.Call {
			return testutil.Call{Method: http.MethodGet, URL: cl.url + path, Auth: cl.auth}
		}
	}
	// onLease and onResource build the cell's call on a fixture lease or
	// resource of its machine, with the cell's credential.
	onLease := func(call func(cl cell, l wire.PortLease) testutil.Call) func(*testing.T, *authEnv, cell) testutil.Call {
		return func(t *testing.T, e *authEnv, cl cell) testutil.Call {
			cc := call(cl, e.lease(t, cl))
			cc.Auth = cl.auth
			return cc
		}
	}
	onResource := func(call func(cl cell, id string) testutil.Call) func(*testing.T, *authEnv, cell) testutil.Call {
		return func(t *testing.T, e *authEnv, cl cell) testutil.Call {
			cc := call(cl, e.resource(t, cl))
			cc.Auth = cl.auth
			return cc
		}
	}
	all200 := [numKinds]int{200, 200, 200, 200, 200, 200, 200, 200}
	endpoints := []endpoint{
		//                                         none malformed unknown query member A-on-B A-on-A admin
		{name: "GET /v1/primary", want: all200, build: get("/v1/primary")},
		{name: "GET /v1/health", want: all200, build: get("/v1/health")},
		{name: "GET /v1/ready", want: all200, build: get("/v1/ready")},
		{name: "GET /metrics", want: all200, build: get("/metrics")},
		{name: "POST /v1/resources/register", want: [numKinds]int{401, 401, 401, 403, 200, 403, 200, 200},
			build: func(_ *testing.T, _ *authEnv, cl cell) testutil.Call {
				id := fmt.Sprintf("instance:%s/%d", cl.machine, cl.n)
				body := wire.RegisterRequest{ID: id, Kind: "instance", Name: cl.machine, Machine: cl.machine, TTLMs: memberTTL}
				cc := testutil.JSONCall(http.MethodPost, cl.url+"/v1/resources/register", "", body)
				cc.Auth = cl.auth
				return cc
			}},
		{name: "POST /v1/resources/{id}/heartbeat", want: [numKinds]int{401, 401, 401, 403, 200, 403, 200, 200},
			build: onResource(func(cl cell, id string) testutil.Call {
				return testutil.Call{Method: http.MethodPost, URL: cl.url + "/v1/resources/" + member.EscapeID(id) + "/heartbeat",
					Body: "{}", ContentType: "application/json"}
			})},
		{name: "DELETE /v1/resources/{id}", want: [numKinds]int{401, 401, 401, 403, 204, 403, 204, 204},
			build: onResource(func(cl cell, id string) testutil.Call {
				return testutil.Call{Method: http.MethodDelete, URL: cl.url + "/v1/resources/" + member.EscapeID(id)}
			})},
		{name: "GET /v1/resources?machine=", want: [numKinds]int{401, 401, 401, 200, 200, 403, 200, 200},
			build: onResource(func(cl cell, _ string) testutil.Call {
				return testutil.Call{Method: http.MethodGet, URL: cl.url + "/v1/resources?machine=" + cl.machine}
			}),
			check: func(t *testing.T, _ *authEnv, cl cell, r testutil.Reply) {
				for _, res := range testutil.Decode[[]wire.Resource](t, r) {
					if res.Machine != cl.machine {
						t.Errorf("GET /v1/resources?machine=%s listed %s of machine %s", cl.machine, res.ID, res.Machine)
					}
				}
			}},
		{name: "GET /v1/resources/{id}", want: [numKinds]int{401, 401, 401, 200, 200, 403, 200, 200},
			build: onResource(func(cl cell, id string) testutil.Call {
				return testutil.Call{Method: http.MethodGet, URL: cl.url + "/v1/resources/" + member.EscapeID(id)}
			})},
		{name: "POST /v1/leases/port", want: [numKinds]int{401, 401, 401, 403, 201, 403, 201, 201},
			build: func(_ *testing.T, _ *authEnv, cl cell) testutil.Call {
				cc := testutil.JSONCall(http.MethodPost, cl.url+"/v1/leases/port", "", wire.AcquireRequest{Machine: cl.machine, Purpose: "matrix", TTLMs: memberTTL})
				cc.Auth = cl.auth
				return cc
			}},
		// Renewal is the owner's alone: the admin token gets 403 on a lease
		// the member token holds.
		{name: "POST /v1/leases/port/{port}/heartbeat", want: [numKinds]int{401, 401, 401, 403, 200, 403, 200, 403},
			build: onLease(func(cl cell, l wire.PortLease) testutil.Call {
				return leaseCall(http.MethodPost, cl.url, l.Port, "", l.LeaseID)
			})},
		// Release: the owner, or the admin token for any lease.
		{name: "DELETE /v1/leases/port/{port}", want: [numKinds]int{401, 401, 401, 403, 204, 403, 204, 204},
			build: onLease(func(cl cell, l wire.PortLease) testutil.Call {
				return leaseCall(http.MethodDelete, cl.url, l.Port, "", l.LeaseID)
			})},
		{name: "GET /v1/leases/port", want: [numKinds]int{401, 401, 401, 200, 200, 200, 200, 200},
			build: func(t *testing.T, e *authEnv, cl cell) testutil.Call {
				e.lease(t, cl)
				return testutil.Call{Method: http.MethodGet, URL: cl.url + "/v1/leases/port", Auth: cl.auth}
			},
			check: func(t *testing.T, _ *authEnv, cl cell, r testutil.Reply) {
				leases := testutil.Decode[[]wire.PortLease](t, r)
				if len(leases) == 0 && cl.kind != machineOnOther {
					t.Errorf("GET /v1/leases/port = [], want the fixture lease")
				}
				if cl.kind == machineOnOther {
					for _, l := range leases {
						if l.Machine != machineA {
							t.Errorf("machine token of %s listed the lease on port %d of %s", machineA, l.Port, l.Machine)
						}
					}
				}
			}},
		{name: "GET /v1/leases/port/{port}", want: [numKinds]int{401, 401, 401, 200, 200, 403, 200, 200},
			build: onLease(func(cl cell, l wire.PortLease) testutil.Call {
				return testutil.Call{Method: http.MethodGet, URL: cl.url + "/v1/leases/port/" + strconv.Itoa(l.Port)}
			})},
		{name: "POST /v1/fences/check", want: [numKinds]int{401, 401, 401, 200, 200, 403, 200, 200},
			build: onLease(func(cl cell, l wire.PortLease) testutil.Call { return fenceCall(cl.url, "", l.Port, l.Fence) })},
		{name: "POST /v1/tokens/member", want: [numKinds]int{401, 401, 401, 403, 403, 403, 403, 201},
			build: func(_ *testing.T, _ *authEnv, cl cell) testutil.Call {
				cc := testutil.JSONCall(http.MethodPost, cl.url+"/v1/tokens/member", "", wire.IssueTokenRequest{Machine: fmt.Sprintf("issued-%d", cl.n)})
				cc.Auth = cl.auth
				return cc
			}},
		{name: "DELETE /v1/tokens/member/{machine}", want: [numKinds]int{401, 401, 401, 403, 403, 403, 403, 204},
			build: func(t *testing.T, e *authEnv, cl cell) testutil.Call {
				victim := fmt.Sprintf("victim-%d", cl.n)
				issueToken(t, e.c, e.leaderURL(), victim)
				return testutil.Call{Method: http.MethodDelete, URL: cl.url + "/v1/tokens/member/" + victim, Auth: cl.auth}
			}},
		{name: "GET /v1/tokens/member", want: [numKinds]int{401, 401, 401, 403, 403, 403, 403, 200},
			build: get("/v1/tokens/member")},
		{name: "GET /v1/cluster/timeline", want: [numKinds]int{401, 401, 401, 200, 200, 200, 200, 200},
			build: get("/v1/cluster/timeline")},
		{name: "GET /v1/cluster/status", want: [numKinds]int{401, 401, 401, 200, 200, 200, 200, 200},
			build: get("/v1/cluster/status")},
		{name: "GET /v1/cluster/overview", want: [numKinds]int{401, 401, 401, 200, 200, 200, 200, 200},
			build: get("/v1/cluster/overview")},
	}

	unexpected2xx := 0
	i := 0
	for _, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) {
			for k := range numKinds {
				node := c.Nodes[i%len(c.Nodes)]
				i++
				t.Run(kindNames[k], func(t *testing.T) {
					defer releaseAll(t, c) // keep the band free for the next cell
					cl := e.cell(k, node.URL)
					req := ep.build(t, e, cl)
					c.WaitApplied() // fixtures (and the machine tokens) are on the node asked
					r := testutil.Send(t, req)
					want := ep.want[k]
					if r.Status/100 == 2 && want/100 != 2 {
						unexpected2xx++
						t.Errorf("UNEXPECTED 2xx: %s with %s through %s = %s, want %d", ep.name, kindNames[k], node.Machine, r, want)
						return
					}
					if r.Status != want {
						t.Fatalf("%s with %s through %s = %s, want %d", ep.name, kindNames[k], node.Machine, r, want)
					}
					if r.Status >= 400 {
						code := map[int]string{401: wire.CodeUnauthorized, 403: wire.CodeForbidden}[r.Status]
						if err := testutil.CheckError(r, code); err != nil {
							t.Fatalf("%s with %s: %v", ep.name, kindNames[k], err)
						}
						return
					}
					if ep.check != nil {
						ep.check(t, e, cl, r)
					}
				})
			}
		})
	}
	if unexpected2xx != 0 {
		t.Errorf("%d unexpected 2xx answers in the matrix", unexpected2xx)
	}
}

// TestServer_IssueMemberToken: a machine token is shown once, in the 201 body,
// and is never written to disk (raft log, stable store, snapshots); once
// revoked, every node refuses it with 401.
func TestServer_IssueMemberToken(t *testing.T) {
	c := apitest.Start(t, clusterOptions())
	var issued []wire.IssuedToken
	for i, n := range c.Nodes {
		machine := fmt.Sprintf("secret-%d", i)
		r := testutil.Send(t, testutil.JSONCall(http.MethodPost, n.URL+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: machine}))
		testutil.WantStatus(t, "issue through "+n.Machine, r, http.StatusCreated)
		tok := testutil.Decode[wire.IssuedToken](t, r)
		if tok.Machine != machine || !wire.ValidToken(tok.Token) || tok.IssuedAt == "" {
			t.Fatalf("issue through %s = %+v, want machine %s, 64 lowercase hex, issuedAt", n.Machine, tok, machine)
		}
		if got := strings.Count(string(r.Body), tok.Token); got != 1 {
			t.Fatalf("the 201 body holds the token %d times, want 1", got)
		}
		for name, vals := range r.Header {
			if strings.Contains(strings.ToLower(strings.Join(vals, " ")), tok.Token) {
				t.Fatalf("response header %s carries the token", name)
			}
		}
		issued = append(issued, tok)
	}
	c.WaitApplied()

	t.Run("shown once", func(t *testing.T) {
		for _, n := range c.Nodes {
			for _, path := range []string{"/v1/tokens/member", "/v1/cluster/status", "/metrics"} {
				r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + path, Auth: testutil.Bearer(c.Tokens.Admin)})
				testutil.WantStatus(t, "GET "+path, r, http.StatusOK)
				for _, tok := range issued {
					if bytes.Contains(bytes.ToLower(r.Body), []byte(tok.Token)) {
						t.Errorf("GET %s on %s shows the token of %s", path, n.Machine, tok.Machine)
					}
				}
			}
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/tokens/member", Auth: testutil.Bearer(c.Tokens.Admin)})
			list := testutil.Decode[[]wire.TokenInfo](t, r)
			if len(list) != len(issued) {
				t.Errorf("GET /v1/tokens/member on %s lists %d tokens, want %d", n.Machine, len(list), len(issued))
			}
		}
	})

	t.Run("never on disk", func(t *testing.T) {
		// Take a snapshot on every node so the snapshot store is searched too.
		for _, n := range c.Nodes {
			if err := n.Node.Raft().Snapshot().Error(); err != nil {
				t.Fatalf("snapshot on %s: %v", n.Machine, err)
			}
		}
		files := 0
		for _, n := range c.Nodes {
			err := filepath.WalkDir(n.DataDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				files++
				for _, tok := range issued {
					raw, _ := hex.DecodeString(tok.Token)
					for form, needle := range map[string][]byte{
						"lowercase": []byte(tok.Token), "uppercase": []byte(strings.ToUpper(tok.Token)), "raw bytes": raw,
					} {
						if bytes.Contains(data, needle) {
							t.Errorf("the token of %s (%s) is on disk in %s", tok.Machine, form, path)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("walk %s: %v", n.DataDir, err)
			}
		}
		if files < 2*len(c.Nodes) {
			t.Fatalf("searched %d files, want at least the raft store and a snapshot per node", files)
		}
		t.Logf("searched %d files in %d data dirs", files, len(c.Nodes))
	})

	t.Run("revoked everywhere", func(t *testing.T) {
		tok := issued[0]
		for _, n := range c.Nodes {
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/resources", Auth: testutil.Bearer(tok.Token)})
			testutil.WantStatus(t, "GET with the token on "+n.Machine, r, http.StatusOK)
		}
		follower := c.Nodes[c.Follower()]
		r := testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: follower.URL + "/v1/tokens/member/" + tok.Machine, Auth: testutil.Bearer(c.Tokens.Admin)})
		testutil.WantStatus(t, "revoke through a follower", r, http.StatusNoContent)
		for _, n := range c.Nodes {
			var last testutil.Reply
			testutil.WaitFor(t, "401 from "+n.Machine, 10*time.Second, func() bool {
				last = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/resources", Auth: testutil.Bearer(tok.Token)})
				return last.Status == http.StatusUnauthorized
			})
			testutil.WantError(t, "revoked token on "+n.Machine, last, http.StatusUnauthorized, wire.CodeUnauthorized)
			write := testutil.Send(t, testutil.JSONCall(http.MethodPost, n.URL+"/v1/leases/port", tok.Token, wire.AcquireRequest{Machine: tok.Machine, Purpose: "x", TTLMs: 1000}))
			testutil.WantError(t, "write with the revoked token on "+n.Machine, write, http.StatusUnauthorized, wire.CodeUnauthorized)
		}
		r = testutil.Send(t, testutil.Call{Method: http.MethodDelete, URL: follower.URL + "/v1/tokens/member/" + tok.Machine, Auth: testutil.Bearer(c.Tokens.Admin)})
		testutil.WantError(t, "revoke again", r, http.StatusNotFound, wire.CodeNotFound)
		// The other tokens still work.
		r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: follower.URL + "/v1/resources", Auth: testutil.Bearer(issued[1].Token)})
		testutil.WantStatus(t, "GET with another machine token", r, http.StatusOK)
	})

	// A token is usable through every candidate as soon as the entry that
	// issued it has reached that candidate, before it has applied it (a
	// follower that lags asks the leader).
	t.Run("usable at once on every node", func(t *testing.T) {
		defer releaseAll(t, c)
		leader := c.Nodes[c.Leader()]
		for i, n := range c.Nodes {
			machine := fmt.Sprintf("fresh-%d", i)
			r := testutil.Send(t, testutil.JSONCall(http.MethodPost, leader.URL+"/v1/tokens/member", c.Tokens.Admin, wire.IssueTokenRequest{Machine: machine}))
			testutil.WantStatus(t, "POST /v1/tokens/member", r, http.StatusCreated)
			tok, index := testutil.Decode[wire.IssuedToken](t, r), headerUint(t, r, wire.HeaderIndex)
			c.WaitFor(n.Machine+" received the issuing entry", 10*time.Second, func() bool { return n.Node.Raft().LastIndex() >= index })
			r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/leases/port", Auth: testutil.Bearer(tok.Token), NoRetry: true})
			testutil.WantStatus(t, "GET with a fresh token through "+n.Machine, r, http.StatusOK)
			r = testutil.Send(t, testutil.JSONCall(http.MethodPost, n.URL+"/v1/leases/port", tok.Token, wire.AcquireRequest{Machine: machine, Purpose: "fresh", TTLMs: memberTTL}))
			testutil.WantStatus(t, "acquire with a fresh token through "+n.Machine, r, http.StatusCreated)
			// A blocking query whose index has already passed answers at once.
			r = testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/leases/port?index=1&wait=5s", Auth: testutil.Bearer(tok.Token), NoRetry: true})
			testutil.WantStatus(t, "blocking GET with a fresh token through "+n.Machine, r, http.StatusOK)
		}
		// A token nobody issued is still 401, from the follower (asking the
		// leader) as from the leader, with WWW-Authenticate.
		for _, n := range c.Nodes {
			r := testutil.Send(t, testutil.Call{Method: http.MethodGet, URL: n.URL + "/v1/resources", Auth: testutil.Bearer(testutil.RandomToken())})
			testutil.WantError(t, "unknown token on "+n.Machine, r, http.StatusUnauthorized, wire.CodeUnauthorized)
		}
	})
}
