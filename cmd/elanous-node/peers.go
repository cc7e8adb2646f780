package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/cluster"
	"github.com/elanous/elanous-node/config"
	"github.com/elanous/elanous-node/member"
	"github.com/elanous/elanous-node/wire"
)

func newPeersCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "peers",
		Short: "List, add, remove, promote or demote the cluster's servers",
		Long: `Manage the servers (candidates) of the cluster. The cluster keeps a replicated
candidate directory — machine, URL, Raft address, voter or not — that every
node forwards by and answers /v1/primary from, and that members refresh their
candidate list from; cluster.candidates in the configuration only seeds it.
So after "peers add" or "peers remove" no configuration file needs an edit.

A new server joins as a non-voter and the leader promotes it to voter once it
has caught up (its applied index within 256 entries of the leader's, in
contact with the leader, for 3 s). A removal or demotion that would leave a
voter set whose reachable members are not a majority is refused unless
--force is given.

list needs a query token (or a machine token); add, remove, promote and
demote need the admin token.`,
		Example: `  elanous-node peers list
  elanous-node peers add --machine node-d --url http://10.0.0.4:31413 --raft 10.0.0.4:31412 --wait 2m
  elanous-node peers remove node-c
  elanous-node peers demote node-b && elanous-node peers promote node-b`,
	}, newPeersListCmd(), newPeersAddCmd(), newPeersRemoveCmd(), newPeersPromoteCmd(), newPeersDemoteCmd())
}

func newPeersListCmd() *cobra.Command {
	return newList(listCommand[wire.Peer]{
		cmd: &cobra.Command{
			Short: "List the servers: url, raft address, voter or not, leader, last contact, lag",
			Long: `List the servers of the cluster: machine, URL, Raft address, suffrage (voter,
nonvoter, or "none" for a directory entry that is no server), whether it
leads, and — from the leader's latest probe of each — its last contact with
the leader and how many entries it lags behind. A non-voter marked
"promoting" becomes a voter once it has caught up.

` + listReadHelp + ` A --stale read shows no last contact and no lag.`,
			Example: `  elanous-node peers list
  elanous-node peers list --json | jq '.[] | select(.suffrage == "voter") | .machine'`,
		},
		scope:  member.ScopeQuery,
		what:   "peers",
		fetch:  (*member.Client).ListPeers,
		header: "MACHINE\tURL\tRAFT\tSUFFRAGE\tLEADER\tLAST CONTACT\tLAG\tSTATE",
		row: func(w io.Writer, p wire.Peer) {
			leader := ""
			if p.Leader {
				leader = "leader"
			}
			contact, lag := "-", "-"
			if h := p.Health; h != nil && h.Reachable {
				contact, lag = lastContactText(h.LastContactMs), strconv.FormatUint(h.Lag, 10)
			} else if h != nil {
				contact = "unreachable"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Machine, orDash(p.URL), orDash(p.Raft), p.Suffrage,
				orDash(leader), contact, lag, peerState(p))
		},
	})
}

// lastContactText prints a last contact in milliseconds.
func lastContactText(ms int64) string {
	if ms < 0 {
		return "never"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// peerState says what the leader will do with a server, or how it is.
func peerState(p wire.Peer) string {
	switch {
	case p.Suffrage == wire.SuffrageNone:
		return "not a server"
	case p.URL == "":
		return "no url (run peers add again)"
	case p.Promoting && p.Health != nil && p.Health.CaughtUp:
		return "promoting (caught up)"
	case p.Promoting:
		return "promoting (catching up)"
	case p.Demoting:
		return "demoting"
	case p.Health != nil && !p.Health.Reachable:
		return "unreachable"
	case p.Health != nil && !p.Health.CaughtUp:
		return "lagging"
	}
	return "ok"
}

func newPeersAddCmd() *cobra.Command {
	var (
		wait             time.Duration
		rawURL, raftAddr string
		machine          string
		nonvoter         bool
	)
	cmd := newClientCmd(clientCmd[wire.Peer]{
		cmd: &cobra.Command{
			Use:   "add --machine M --url U --raft A [--nonvoter] [--wait DUR]",
			Short: "Add a server: a non-voter, promoted once it has caught up",
			Long: `Add a server to the cluster. Start it first with cluster.bootstrap: false and
no Raft state: it waits to be added (its /v1/ready answers 503 not-ready).
The leader adds it to the Raft configuration as a non-voter, records it in
the candidate directory, replicates the state to it (a snapshot when the log
has been compacted) and promotes it to voter once it has caught up —
unless --nonvoter is given, when it stays a non-voter (it serves reads and
forwards writes, but does not vote).

Adding a machine that is already a server at that Raft address only brings
its URL up to date (and completes an add that stopped half way). A machine
that is a server at another address must be removed first. Since adding is
idempotent, the command tries again while there is no leader to take it (503
or an unreachable server, as during an election), for up to 15 s.

With --wait the command returns only once the server is a voter (or, with
--nonvoter, caught up), printing how long that took; it fails when --wait
passes first.`,
			Example:               `  elanous-node peers add --machine node-d --url http://10.0.0.4:31413 --raft 10.0.0.4:31412 --wait 2m`,
			Args:                  cobra.NoArgs,
			DisableFlagsInUseLine: true,
		},
		jsonHelp: "print the server as JSON",
		run: func(cmd *cobra.Command, _ []string, flags *clientFlags) (peer wire.Peer, err error) {
			req := wire.AddPeerRequest{Machine: machine, URL: rawURL, Raft: raftAddr, Nonvoter: nonvoter}
			if !wire.ValidCandidate(req.Machine) {
				return peer, fmt.Errorf("--machine %q must match %s", req.Machine, wire.CandidatePatternText)
			}
			origin, err := wire.ParseOrigin(req.URL)
			if err != nil {
				return peer, fmt.Errorf("--url: %w", err)
			}
			req.URL = origin
			c, err := scopedClient(cmd, flags, member.ScopeAdmin)
			if err != nil {
				return peer, err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
			defer cancel()
			started := time.Now()
			err = untilAnswered(ctx, c, func(ctx context.Context) (err error) {
				peer, err = c.AddPeer(ctx, req)
				return err
			})
			if err != nil {
				return peer, fmt.Errorf("add %s: %w", req.Machine, explain(err, member.ScopeAdmin))
			}
			progress := cmd.ErrOrStderr()
			fmt.Fprintf(progress, "added %s (%s, raft %s) as a %s%s\n", peer.Machine, peer.URL, peer.Raft, peer.Suffrage, promotingNote(peer))
			if wait > 0 {
				if peer, err = waitPeer(cmd.Context(), c, req.Machine, !req.Nonvoter, wait); err != nil {
					return peer, fmt.Errorf("add %s: %w", req.Machine, err)
				}
				what := "caught up"
				if !req.Nonvoter {
					what = "a voter"
				}
				fmt.Fprintf(progress, "%s is %s after %s\n", peer.Machine, what, time.Since(started).Round(time.Millisecond))
			}
			return peer, nil
		},
	})
	fs := cmd.Flags()
	fs.StringVar(&machine, "machine", "", "the new server's machine name, its node.id (required)")
	fs.StringVar(&rawURL, "url", "", "its HTTP API URL, e.g. http://10.0.0.4:31413 (required)")
	fs.StringVar(&raftAddr, "raft", "", "its advertised Raft address, e.g. 10.0.0.4:31412 (required)")
	fs.BoolVar(&nonvoter, "nonvoter", false, "keep it a non-voter (it is not promoted)")
	fs.DurationVar(&wait, "wait", 0, "wait up to this long until it is a voter (with --nonvoter: caught up)")
	_ = cmd.MarkFlagRequired("machine")
	_ = cmd.MarkFlagRequired("url")
	_ = cmd.MarkFlagRequired("raft")
	return cmd
}

func promotingNote(p wire.Peer) string {
	if p.Promoting {
		return "; the leader promotes it to voter once it has caught up"
	}
	return ""
}

// waitPeer polls the leader's list until machine is a voter (voter) or
// caught up, or until d passes.
func waitPeer(ctx context.Context, c *member.Client, machine string, voter bool, d time.Duration) (wire.Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "not listed"
	for {
		list, err := c.ListPeers(ctx, member.ReadOptions{Consistent: true})
		if err != nil {
			last = err.Error()
			if member.IsRetryable(err) {
				_, _ = c.Reresolve(ctx)
			}
		}
		for _, p := range list {
			if p.Machine != machine {
				continue
			}
			last = fmt.Sprintf("%s, %s", p.Suffrage, peerState(p))
			if (voter && p.Suffrage == wire.SuffrageVoter) || (!voter && p.Health != nil && p.Health.CaughtUp) {
				return p, nil
			}
		}
		select {
		case <-ctx.Done():
			return wire.Peer{}, fmt.Errorf("not done within %s (last: %s)", d, last)
		case <-tick.C:
		}
	}
}

func newPeersRemoveCmd() *cobra.Command {
	var force bool
	cmd := newClientCmd(clientCmd[struct{}]{
		cmd: &cobra.Command{
			Use:   "remove MACHINE [--force]",
			Short: "Remove a server (refused if it would lose the quorum, unless --force)",
			Long: `Remove a server from the Raft configuration and the candidate directory. The
leader first counts the voters that would be left and answer it; if they are
not a majority of the new voter set, the removal is refused (409
quorum-at-risk) and nothing changes, unless --force is given. The last voter
is never removed. Removing the leader is allowed: it steps down and another
voter leads.

Members refresh their candidate list from the cluster, so they stop using
the removed server without any change on their side.`,
			Example: `  elanous-node peers remove node-c`,
			Args:    cobra.ExactArgs(1),
		},
		run: func(cmd *cobra.Command, args []string, flags *clientFlags) (struct{}, error) {
			machine := args[0]
			if err := checkCandidateArg(machine); err != nil {
				return struct{}{}, err
			}
			return runCall(cmd, flags, member.ScopeAdmin, "remove "+machine, func(ctx context.Context, c *member.Client) (struct{}, error) {
				return struct{}{}, c.RemovePeer(ctx, machine, force)
			})
		},
		text: func(cmd *cobra.Command, args []string, _ struct{}) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return err
		},
	})
	cmd.Flags().BoolVar(&force, "force", false, "remove it even if the voters left that answer are not a majority")
	return cmd
}

func newPeersPromoteCmd() *cobra.Command {
	return newSuffrageCmd(&cobra.Command{
		Use:   "promote MACHINE",
		Short: "Make a non-voter a voter now",
		Long: `Make a server a voter at once, and keep it one. Use it for a server added
with --nonvoter (or demoted) once it has caught up; a server added without
--nonvoter is promoted by the leader by itself.`,
		Example: `  elanous-node peers promote node-d`,
	}, func(ctx context.Context, c *member.Client, machine string) (wire.Peer, error) {
		return c.PromotePeer(ctx, machine)
	})
}

func newPeersDemoteCmd() *cobra.Command {
	var force bool
	cmd := newSuffrageCmd(&cobra.Command{
		Use:   "demote MACHINE [--force]",
		Short: "Make a voter a non-voter (refused if it would lose the quorum, unless --force)",
		Long: `Make a voter a non-voter, and keep it one (the leader does not promote it
again). Refused like "peers remove" when the voters left that answer would
not be a majority, unless --force is given.`,
		Example: `  elanous-node peers demote node-b`,
	}, func(ctx context.Context, c *member.Client, machine string) (wire.Peer, error) {
		return c.DemotePeer(ctx, machine, force)
	})
	cmd.Flags().BoolVar(&force, "force", false, "demote it even if the voters left that answer are not a majority")
	return cmd
}

// newSuffrageCmd completes promote or demote (cmd states Use, Short, Long
// and Example): one argument, the server MACHINE, whose suffrage call
// changes (admin scope); it prints the suffrage the server has then.
func newSuffrageCmd(cmd *cobra.Command, call func(ctx context.Context, c *member.Client, machine string) (wire.Peer, error)) *cobra.Command {
	cmd.Args = cobra.ExactArgs(1)
	return newClientCmd(clientCmd[wire.Peer]{
		cmd: cmd,
		run: func(cmd *cobra.Command, args []string, flags *clientFlags) (wire.Peer, error) {
			machine := args[0]
			if err := checkCandidateArg(machine); err != nil {
				return wire.Peer{}, err
			}
			return runCall(cmd, flags, member.ScopeAdmin, cmd.Name()+" "+machine, func(ctx context.Context, c *member.Client) (wire.Peer, error) {
				return call(ctx, c, machine)
			})
		},
		text: func(cmd *cobra.Command, _ []string, peer wire.Peer) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s is a %s\n", peer.Machine, peer.Suffrage)
			return err
		},
	})
}

// checkCandidateArg refuses a MACHINE argument that is no candidate name.
func checkCandidateArg(machine string) error {
	if !wire.ValidCandidate(machine) {
		return fmt.Errorf("machine %q must match %s", machine, wire.CandidatePatternText)
	}
	return nil
}

// withSelf returns cands with this node's own entry (node.id at
// http.advertise and raft.advertise) appended when the configuration does
// not list it, as a node that waits to be added need not.
func withSelf(cfg config.Config, cands []cluster.Candidate) []cluster.Candidate {
	if _, ok := cfg.Self(); ok {
		return cands
	}
	url, err := wire.ParseOrigin(cfg.HTTP.Advertise)
	if err != nil {
		url = cfg.HTTP.Advertise
	}
	return append(cands, cluster.Candidate{Machine: cfg.Node.ID, URL: url, Raft: cfg.Raft.Advertise})
}
