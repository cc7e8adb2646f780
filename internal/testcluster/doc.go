// Package testcluster runs real elanous-node processes for the end-to-end
// tests (cmd/elanous-node), the fault suite (scripts/chaos) and the etcd
// comparison (scripts/bench/etcdcompare): the part the three share, once.
//
// What it promises:
//
//   - Build compiles the binary (Binary: once per run); a caller may as well
//     pass a binary it was given.
//   - NodeConfig is one candidate's configuration document, written by
//     WriteConfig; InitTokens makes the cluster tokens file with the binary's
//     own `init` and copies it to every candidate (mode 0600).
//   - Start runs a process with its output appended to log files. Stop is
//     SIGTERM, then SIGKILL past a bound; Kill is SIGKILL; Pause and Resume
//     are SIGSTOP and SIGCONT; Restart starts the same command again, on the
//     same data dir. Every wait on a process is bounded.
//   - Primary, Status, AgreedPrimary, NewestPrimary and Leader read what the
//     HTTP API says about leadership (GET /v1/primary, GET /v1/cluster/status;
//     docs/http-api.md).
//   - WaitFor is the one polling loop: a condition, an interval, a deadline,
//     and an error naming what was awaited and the condition's last error.
//     Nothing here sleeps for a fixed time.
//   - FreePorts picks loopback ports outside the ranges `elanous-node dev`
//     and the fault suite use.
//
// It is not part of the product: only tests and the scripts' modules import
// it. It imports the standard library and wire (ARCHITECTURE.md, "Packages
// and their rooms").
package testcluster
