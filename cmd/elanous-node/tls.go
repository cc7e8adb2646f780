package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/elanous/elanous-node/cluster/certs"
	"github.com/elanous/elanous-node/wire"
)

// File names of the TLS tooling.
const (
	caCertName = "ca.pem"
	caKeyName  = "ca-key.pem"
)

func newTLSCmd() *cobra.Command {
	return newGroup(&cobra.Command{
		Use:   "tls",
		Short: "Make the cluster's certificate authority and the candidates' certificates",
		Long: `Make the certificates a TLS cluster runs with, in the spirit of
"consul tls ca create" and "consul tls cert create":

  elanous-node tls ca --out DIR      DIR/ca.pem and DIR/ca-key.pem (0600)
  elanous-node tls cert --ca-dir DIR --machine M [--ip IP]... [--dns NAME]... [--with-ca] --out DIR2
                                     DIR2/M.pem and DIR2/M-key.pem (0600)
                                     (and DIR2/ca.pem with --with-ca)

Both keep existing files unless --force; with --if-missing they keep them and
succeed, for bring-up that runs them every time (deploy/compose.yaml).

Keys are ECDSA P-256. A certificate is valid for server and client use and
names M as its first DNS subject alternative name: the Raft transport admits
a peer only with a certificate of the CA naming a candidate, and a dial to a
candidate must reach a certificate naming it. Add every address and host
name clients use in the candidate's https:// URL with --ip and --dns.

Keep ca-key.pem off the candidates (it signs certificates); give each
candidate ca.pem, its own M.pem and M-key.pem, and set tls.ca_file,
tls.cert_file and tls.key_file. Members need only ca.pem (--ca-file, or in
the join file). Rotating: see docs/security.md.`,
		Example: `  elanous-node tls ca --out /root/elanous-ca
  elanous-node tls cert --ca-dir /root/elanous-ca --machine node-a --ip 10.0.0.1 --out /root/node-a
  scp /root/elanous-ca/ca.pem /root/node-a/node-a.pem /root/node-a/node-a-key.pem node-a:/etc/elanous/tls/`,
	}, newTLSCACmd(), newTLSCertCmd())
}

func newTLSCACmd() *cobra.Command {
	var (
		out              string
		days             int
		force, ifMissing bool
	)
	cmd := &cobra.Command{
		Use:   "ca --out DIR",
		Short: "Create the cluster certificate authority: DIR/ca.pem and DIR/ca-key.pem",
		Long: `Create a certificate authority for one cluster: an ECDSA P-256 key written
to DIR/ca-key.pem (mode 0600) and a self-signed CA certificate written to
DIR/ca.pem. Existing files are kept unless --force is given.

With --if-missing an existing CA (both files, a CA certificate and its key)
is kept and the command succeeds, for automated bring-up
(deploy/compose.yaml runs it on every "up"); half a CA is an error.`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certPath, keyPath := filepath.Join(out, caCertName), filepath.Join(out, caKeyName)
			if ifMissing {
				kept, err := keepCA(certPath, keyPath)
				if err != nil {
					return err
				}
				if kept {
					fmt.Fprintf(cmd.OutOrStdout(), "kept the existing CA %s and %s\n", certPath, keyPath)
					return nil
				}
			}
			ca, err := certs.NewCA(time.Now(), time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			if err := writePair(certPath, keyPath, ca, force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (mode 0600; keep it off the candidates)\n", certPath, keyPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write ca.pem and ca-key.pem to (created 0700 if missing; required)")
	cmd.Flags().IntVar(&days, "days", int(certs.DefaultCAValidity/(24*time.Hour)), "days the CA is valid")
	cmd.Flags().BoolVar(&force, "force", false, "replace existing files")
	cmd.Flags().BoolVar(&ifMissing, "if-missing", false, "keep an existing CA and succeed")
	cmd.MarkFlagsMutuallyExclusive("force", "if-missing")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func newTLSCertCmd() *cobra.Command {
	var (
		caDir, machine, out string
		ips                 []net.IP
		dns                 []string
		days                int
		force, ifMissing    bool
		withCA              bool
	)
	cmd := &cobra.Command{
		Use:   "cert --ca-dir DIR --machine M [--ip IP]... [--dns NAME]... --out DIR2",
		Short: "Issue a candidate's certificate: DIR2/M.pem and DIR2/M-key.pem",
		Long: `Issue a certificate signed by the CA in --ca-dir (ca.pem, ca-key.pem) for
machine M: an ECDSA P-256 key written to DIR2/M-key.pem (mode 0600) and a
certificate written to DIR2/M.pem, valid for server and client
authentication, naming M (its common name and first DNS subject alternative
name, the name the Raft transport checks) and every --ip and --dns given.

M is a candidate's node.id for a candidate; another name (not a candidate's)
makes a client certificate, for an API with tls.verify_incoming_api.

--with-ca also writes the CA certificate (never its key) to DIR2/ca.pem, so
that DIR2 holds all a candidate needs: ca.pem, M.pem and M-key.pem. An
existing DIR2/ca.pem that differs from the CA's is refused unless --force.

With --if-missing an existing certificate is kept and the command succeeds,
for automated bring-up (deploy/compose.yaml runs it on every "up"), provided
it is what this command would issue: a pair of this CA, valid now, naming M
and every --ip and --dns (and, with --with-ca, DIR2/ca.pem is the CA's).
Anything else is an error naming the file: remove it, or pass --force.`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !wire.ValidMachine(machine) {
				return fmt.Errorf("--machine %q is not a valid machine name (%s)", machine, wire.MachinePatternText)
			}
			ca, err := readCA(caDir)
			if err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(out, machine+".pem"), filepath.Join(out, machine+"-key.pem")
			caCopy := ""
			if withCA {
				caCopy = filepath.Join(out, caCertName)
			}
			if ifMissing {
				kept, err := keepCert(caDir, ca, certs.CertRequest{Machine: machine, IPs: ips, DNS: dns}, certPath, keyPath, caCopy)
				if err != nil {
					return err
				}
				if kept {
					fmt.Fprintf(cmd.OutOrStdout(), "kept the existing certificate %s and key %s for %s\n", certPath, keyPath, machine)
					return nil
				}
			}
			if caCopy != "" && !force {
				if err := sameOrAbsent(caCopy, ca.Cert); err != nil {
					return err
				}
			}
			pair, err := certs.NewCert(ca, certs.CertRequest{Machine: machine, IPs: ips, DNS: dns, Validity: time.Duration(days) * 24 * time.Hour}, time.Now())
			if err != nil {
				return err
			}
			if err := writePair(certPath, keyPath, pair, force); err != nil {
				return err
			}
			if caCopy != "" {
				if got, err := os.ReadFile(caCopy); err != nil || !bytes.Equal(got, ca.Cert) {
					if err := writeFileMode(caCopy, ca.Cert, 0o644); err != nil {
						return err
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (mode 0600) for %s", certPath, keyPath, machine)
			if len(ips) > 0 || len(dns) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), ", also valid for %v %v", ips, dns)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&caDir, "ca-dir", "", "directory holding ca.pem and ca-key.pem (required)")
	fs.StringVar(&machine, "machine", "", "the machine the certificate is for: a candidate's node.id (required)")
	fs.IPSliceVar(&ips, "ip", nil, "an IP address clients use for it (repeatable)")
	fs.StringArrayVar(&dns, "dns", nil, "a host name clients use for it (repeatable)")
	fs.StringVar(&out, "out", "", "directory to write M.pem and M-key.pem to (created 0700 if missing; required)")
	fs.IntVar(&days, "days", int(certs.DefaultCertValidity/(24*time.Hour)), "days the certificate is valid (never past the CA)")
	fs.BoolVar(&force, "force", false, "replace existing files")
	fs.BoolVar(&ifMissing, "if-missing", false, "keep an existing certificate that is what this command would issue, and succeed")
	fs.BoolVar(&withCA, "with-ca", false, "also write the CA certificate (not its key) to DIR2/ca.pem")
	cmd.MarkFlagsMutuallyExclusive("force", "if-missing")
	for _, f := range []string{"ca-dir", "machine", "out"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// readCA reads dir/ca.pem and dir/ca-key.pem.
func readCA(dir string) (certs.Pair, error) {
	cert, err := os.ReadFile(filepath.Join(dir, caCertName))
	if err != nil {
		return certs.Pair{}, fmt.Errorf("read the CA: %w (make one with: elanous-node tls ca --out %s)", err, dir)
	}
	key, err := os.ReadFile(filepath.Join(dir, caKeyName))
	if err != nil {
		return certs.Pair{}, fmt.Errorf("read the CA key: %w", err)
	}
	return certs.Pair{Cert: cert, Key: key}, nil
}

// keepCA is "tls ca --if-missing": it reports false when neither file
// exists (make the CA), true when both hold a CA certificate and its key
// (keep them), and an error otherwise (half a CA, or not a CA).
func keepCA(certPath, keyPath string) (bool, error) {
	present, err := existing(certPath, keyPath)
	if err != nil || present == 0 {
		return false, err
	}
	if present < 2 {
		return false, fmt.Errorf("%s and %s must both exist or neither; remove the one left, or pass --force", certPath, keyPath)
	}
	ca, err := readCA(filepath.Dir(certPath))
	if err != nil {
		return false, err
	}
	cert, _, err := certs.ParsePair(ca)
	if err != nil {
		return false, fmt.Errorf("existing CA %s: %w; remove it, or pass --force", certPath, err)
	}
	if !cert.IsCA {
		return false, fmt.Errorf("existing %s is not a certificate authority; remove it, or pass --force", certPath)
	}
	return true, nil
}

// keepCert is "tls cert --if-missing": it reports false when none of the
// files exists (issue the certificate), true when they hold what the command
// would issue for req (a pair of the CA in caDir, valid now, naming
// req.Machine and every one of req.IPs and req.DNS; caCopy, when not empty,
// equal to the CA's certificate), and an error naming the file otherwise.
func keepCert(caDir string, ca certs.Pair, req certs.CertRequest, certPath, keyPath, caCopy string) (bool, error) {
	paths := []string{certPath, keyPath}
	if caCopy != "" {
		paths = append(paths, caCopy)
	}
	present, err := existing(paths...)
	if err != nil || present == 0 {
		return false, err
	}
	if present < len(paths) {
		return false, fmt.Errorf("only some of %v exist; remove them, or pass --force", paths)
	}
	store, err := certs.Load(certs.Files{CA: filepath.Join(caDir, caCertName), Cert: certPath, Key: keyPath}, req.Machine)
	if err != nil {
		return false, fmt.Errorf("existing certificate: %w; remove it, or pass --force", err)
	}
	leaf := store.Current().Leaf
	names := slices.Clone(req.DNS)
	for _, ip := range req.IPs {
		names = append(names, ip.String())
	}
	for _, name := range names {
		if err := leaf.VerifyHostname(name); err != nil {
			return false, fmt.Errorf("existing certificate %s does not name %s; remove it, or pass --force", certPath, name)
		}
	}
	if caCopy != "" {
		if err := sameOrAbsent(caCopy, ca.Cert); err != nil {
			return false, err
		}
	}
	return true, nil
}

// existing counts the paths that exist.
func existing(paths ...string) (int, error) {
	n := 0
	for _, path := range paths {
		if _, err := os.Stat(path); err == nil {
			n++
		} else if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
	}
	return n, nil
}

// sameOrAbsent succeeds when path does not exist or holds exactly data.
func sameOrAbsent(path string, data []byte) error {
	got, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !bytes.Equal(got, data):
		return fmt.Errorf("%s already exists and is not this CA's certificate; keep it, or pass --force to replace it", path)
	}
	return nil
}

// writePair writes a certificate (mode 0644) and its key (mode 0600),
// creating their directory with mode 0700. Without replace an existing file
// is an error naming it and --force.
func writePair(certPath, keyPath string, p certs.Pair, replace bool) error {
	if !replace {
		for _, path := range []string{certPath, keyPath} {
			if _, err := os.Stat(path); err == nil {
				return fmt.Errorf("%s already exists; keep it, or pass --force to replace it", path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(keyPath), err)
	}
	// The key first, so a certificate never exists without its key.
	if err := writeFileMode(keyPath, p.Key, 0o600); err != nil {
		return err
	}
	return writeFileMode(certPath, p.Cert, 0o644)
}

// writeFileMode replaces path with data through a temporary file created
// with mode, synced and renamed, so a reader (a SIGHUP reload) sees the old
// file or the new one, never half of one.
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
