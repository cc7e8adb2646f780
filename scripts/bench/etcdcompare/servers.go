package main

import (
	"path/filepath"

	"github.com/elanous/elanous-node/internal/testcluster"
)

// server is one server process of a benchmarked cluster: its name, data
// directory and log file, the process (nil until started) and how many times
// it was restarted. elanousNode and etcdMember embed it.
type server struct {
	name, dataDir, logPath string
	p                      *testcluster.Proc
	restarts               int
}

func (s *server) base() *server { return s }

// serverOf is a cluster's node type, which embeds server.
type serverOf interface{ base() *server }

// start runs bin with args and env through procs, its output appended to the
// server's log file.
func (s *server) start(procs *procs, bin string, args, env []string) error {
	p, err := procs.start(bin, args, env, s.logPath)
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// logPaths returns the servers' log files, in order.
func logPaths[S serverOf](servers []S) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.base().logPath)
	}
	return out
}

// killAll kills every server that was started.
func killAll[S serverOf](servers []S) {
	for _, s := range servers {
		if p := s.base().p; p != nil {
			_ = p.Kill()
		}
	}
}

// usageOf reports the servers of system: each one's process, its database
// (dbName, at the path dbPath under its data directory) and data directory.
func usageOf[S serverOf](servers []S, system, dbName string, dbPath ...string) []nodeUsage {
	var out []nodeUsage
	for _, srv := range servers {
		s := srv.base()
		out = append(out, nodeUsage{System: system, Node: s.name, PID: s.p.Pid(), RSSBytes: rssBytes(s.p.Pid()),
			DBName: dbName, DBBytes: fileSize(filepath.Join(append([]string{s.dataDir}, dbPath...)...)),
			DataBytes: dirSize(s.dataDir), Restarts: s.restarts})
	}
	return out
}
