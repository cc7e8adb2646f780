package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/elanous/elanous-node/scripts/chaos/check"
	"github.com/elanous/elanous-node/scripts/chaos/harness"
	"github.com/elanous/elanous-node/wire"
)

// The container scenario runs deploy/compose.yaml under this project name,
// with the image built from deploy/Dockerfile and a chaos build.
const (
	composeProject = "elnchaos"
	chaosImage     = "elanous-node:chaos"
	clusterNet     = composeProject + "_cluster"
)

// The APIs are published on host ports of their own, so that the scenario
// does not collide with a dev cluster on 31413-31433.
var dockerNodes = []struct{ name, ip, port, env string }{
	{"node-a", "10.77.1.11", "31513", "ELANOUS_PORT_A"},
	{"node-b", "10.77.1.12", "31523", "ELANOUS_PORT_B"},
	{"node-c", "10.77.1.13", "31533", "ELANOUS_PORT_C"},
}

// dockerEnv is the container backend of one scenario run.
type dockerEnv struct {
	deploy string // the repository's deploy/ directory
	dir    string
	ids    []string // container ids, by node index
}

func docker(ctx context.Context, args ...string) (string, error) {
	return combined(exec.CommandContext(ctx, "docker", args...), "docker", args)
}

// combined runs cmd and returns what it wrote to stdout and stderr together;
// a failure's error names it as name with args and carries that output.
func combined(cmd *exec.Cmd, name string, args []string) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func (d *dockerEnv) compose(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"-p", composeProject, "-f", filepath.Join(d.deploy, "compose.yaml")}, args...)
	cmd := exec.CommandContext(ctx, "docker-compose", full...)
	cmd.Env = append(os.Environ(), "ELANOUS_IMAGE="+chaosImage)
	for _, n := range dockerNodes {
		cmd.Env = append(cmd.Env, n.env+"="+n.port)
	}
	return combined(cmd, "docker-compose", args)
}

// runDocker builds the image, starts the compose cluster and drives it.
func (s *suite) runDocker(ctx context.Context, sc scenario, dir string, mon *leaderMonitor) ([]check.Op, finalState, error) {
	var fs finalState
	if _, err := exec.LookPath("docker-compose"); err != nil {
		return nil, fs, fmt.Errorf("docker-compose is not installed (apt-get install docker-compose)")
	}
	root, err := productRoot(ctx)
	if err != nil {
		return nil, fs, err
	}
	d := &dockerEnv{deploy: filepath.Join(root, "deploy"), dir: dir}
	// The image: deploy/build-image with the static chaos binary.
	if err := staticELF(s.bin); err != nil {
		return nil, fs, err
	}
	s.logf("[%s] deploy/build-image --binary %s --tag %s", sc.name, s.bin, chaosImage)
	bcmd := exec.CommandContext(ctx, filepath.Join(d.deploy, "build-image"), "--binary", s.bin, "--tag", chaosImage, "--quiet")
	if out, err := bcmd.CombinedOutput(); err != nil {
		return nil, fs, fmt.Errorf("deploy/build-image: %w: %s", err, out)
	}
	_, _ = d.compose(context.WithoutCancel(ctx), "down", "-v", "--remove-orphans")
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for i, id := range d.ids {
			_, _ = docker(dctx, "unpause", id)
			if out, err := exec.CommandContext(dctx, "docker", "logs", id).CombinedOutput(); err == nil {
				_ = os.WriteFile(filepath.Join(dir, dockerNodes[i].name+".log"), out, 0o644)
			}
		}
		_, _ = d.compose(dctx, "down", "-v", "--remove-orphans")
		_, _ = docker(dctx, "rmi", "-f", chaosImage)
	}()
	s.logf("[%s] docker-compose up", sc.name)
	if _, err := d.compose(ctx, "up", "-d"); err != nil {
		return nil, fs, err
	}
	for _, n := range dockerNodes {
		out, err := d.compose(ctx, "ps", "-q", n.name)
		if err != nil {
			return nil, fs, err
		}
		d.ids = append(d.ids, strings.TrimSpace(out))
	}
	// compose drew the cluster tokens and made the CA at bring-up: read the
	// tokens from the tokens volume and ca.pem from a candidate's TLS volume.
	tokens, err := containerTokens(ctx, d.ids[0])
	if err != nil {
		return nil, fs, err
	}
	clientTLS, err := containerCA(ctx, d.ids[0])
	if err != nil {
		return nil, fs, err
	}
	// The certificates name 127.0.0.1, where the APIs are published.
	var names, urls []string
	for _, n := range dockerNodes {
		names, urls = append(names, n.name), append(urls, "https://127.0.0.1:"+n.port)
	}
	c := harness.Attach(names, urls, tokens, clientTLS)
	for i, n := range c.Nodes {
		n.LogPath = filepath.Join(dir, dockerNodes[i].name+".log")
	}
	e := &env{s: s, name: sc.name, c: c, dock: d}
	if _, err := e.leader(ctx); err != nil {
		return nil, fs, fmt.Errorf("container cluster did not elect a leader (see node-*.log): %w", err)
	}
	h, fs, err := s.drive(ctx, sc, e, mon)
	// drive read the logs before they were written: read them now.
	for i, id := range d.ids {
		if out, lerr := exec.Command("docker", "logs", id).CombinedOutput(); lerr == nil {
			_ = os.WriteFile(filepath.Join(dir, dockerNodes[i].name+".log"), out, 0o644)
		}
	}
	for _, line := range c.PanicLines() {
		fs.violations = append(fs.violations, check.Violation{Kind: "panic", Detail: line})
	}
	return h, fs, err
}

// heal reconnects every container to the cluster network and unpauses it.
func (d *dockerEnv) heal(ctx context.Context) {
	for i, id := range d.ids {
		_, _ = docker(ctx, "unpause", id)
		out, _ := docker(ctx, "inspect", "-f", "{{json .NetworkSettings.Networks}}", id)
		if !strings.Contains(out, clusterNet) {
			_, _ = docker(ctx, "network", "connect", "--ip", dockerNodes[i].ip, clusterNet, id)
		}
	}
}

// dockerFaults disconnects the leader from the cluster network, reconnects
// it, then pauses the leader's container, repeatedly.
func dockerFaults(ctx context.Context, e *env) error {
	d := e.dock
	for round := 0; ctx.Err() == nil; round++ {
		l, err := e.leader(ctx)
		if err != nil {
			return err
		}
		id := d.ids[l]
		if round%2 == 0 {
			e.logf("docker network disconnect %s %s", clusterNet, e.c.Nodes[l].Name)
			if _, err := docker(ctx, "network", "disconnect", clusterNet, id); err != nil {
				return err
			}
			e.sleep(ctx, 4*time.Second)
			e.logf("docker network connect %s", e.c.Nodes[l].Name)
			if _, err := docker(context.WithoutCancel(ctx), "network", "connect", "--ip", dockerNodes[l].ip, clusterNet, id); err != nil {
				return err
			}
		} else {
			e.logf("docker pause %s", e.c.Nodes[l].Name)
			if _, err := docker(ctx, "pause", id); err != nil {
				return err
			}
			e.sleep(ctx, 3*time.Second)
			e.logf("docker unpause %s", e.c.Nodes[l].Name)
			if _, err := docker(context.WithoutCancel(ctx), "unpause", id); err != nil {
				return err
			}
		}
		e.sleep(ctx, 2*time.Second)
	}
	return ctx.Err()
}

// staticELF refuses a dynamically linked binary: a FROM scratch image has no
// loader, and the container would die with "exec /elanous-node: no such file".
func staticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the FROM scratch image needs CGO_ENABLED=0", path)
		}
	}
	return nil
}

// containerTokens reads the cluster tokens compose's init-tokens service
// drew, from the tokens volume every candidate mounts.
func containerTokens(ctx context.Context, id string) (wire.TokensFile, error) {
	var t wire.TokensFile
	const path = "/var/lib/elanous/control/tokens.json"
	data, err := containerFile(ctx, id, path)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("decode %s: %w", path, err)
	}
	return t, nil
}

// containerCA reads the cluster CA certificate compose's init-tls services
// put in each candidate's TLS volume, and returns a client configuration
// that verifies the candidates against it.
func containerCA(ctx context.Context, id string) (*tls.Config, error) {
	const path = "/etc/elanous/tls/ca.pem"
	data, err := containerFile(ctx, id, path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("no certificate in %s", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// containerFile reads one file out of a container with docker cp.
func containerFile(ctx context.Context, id, path string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "docker", "cp", id+":"+path, "-").Output()
	if err != nil {
		return nil, fmt.Errorf("docker cp %s: %w", path, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("docker cp %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("docker cp %s: %w", path, err)
	}
	return data, nil
}
