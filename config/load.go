package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/elanous/elanous-node/wire"
)

// EnvPrefix prefixes every environment variable Load reads: http.addr is
// ELANOUS_HTTP_ADDR.
const EnvPrefix = "ELANOUS"

// LoadOptions are the sources Load layers over the defaults.
type LoadOptions struct {
	// File is the path of elanous.yaml. When empty, the value of a changed
	// "config" flag in Flags is used; when both are empty no file is read.
	// A file that is named but missing is an error.
	File string
	// Flags is the command's flag set, usually one BindFlags defined flags on.
	// Only flags the user changed override; nil means no flags.
	Flags *pflag.FlagSet
	// Env is the environment as "KEY=value" pairs; nil means os.Environ().
	Env []string
}

// flagKeys maps each flag BindFlags defines to the key it overrides.
var flagKeys = []struct{ flag, key, usage string }{
	{"node-id", "node.id", "this node's candidate name"},
	{"data-dir", "node.data_dir", "directory for Raft state and control/tokens.json"},
	{"http-addr", "http.addr", "host:port the HTTP API listens on"},
	{"http-advertise", "http.advertise", "origin clients reach this node's API at, e.g. http://10.0.0.1:31413"},
	{"raft-addr", "raft.addr", "host:port the Raft transport listens on (default: raft.advertise)"},
	{"raft-advertise", "raft.advertise", "host:port other candidates reach this node's Raft transport at"},
	{"bootstrap", "cluster.bootstrap", "bootstrap the cluster from cluster.candidates when this node has no Raft state"},
}

// BindFlags defines the serve flags on fs: --config (unless fs already has
// it, e.g. inherited from the root command) and one flag per key that an
// operator commonly sets on the command line (--node-id, --data-dir,
// --http-addr, --http-advertise, --raft-addr, --raft-advertise, --bootstrap).
// The flags have zero defaults; Load applies only the ones that were set.
func BindFlags(fs *pflag.FlagSet) {
	if fs.Lookup("config") == nil {
		fs.String("config", "", "path to elanous.yaml")
	}
	for _, f := range flagKeys {
		usage := fmt.Sprintf("%s (config key %s)", f.usage, f.key)
		if f.key == "cluster.bootstrap" {
			fs.Bool(f.flag, false, usage)
			continue
		}
		fs.String(f.flag, "", usage)
	}
}

// Load builds a Config from, lowest precedence first: the defaults, the YAML
// file, ELANOUS_* environment variables and the changed flags of opts.Flags.
// It fails on a missing or unreadable file, a key the file should not have,
// an environment value that does not parse, or a value of the wrong type;
// it does not call Validate.
//
// Environment variables are read from opts.Env rather than with viper's
// AutomaticEnv (which reads the process environment directly) so callers and
// tests can supply their own; the values are layered exactly as viper would,
// above the file and below the flags. An empty variable counts as unset.
func Load(opts LoadOptions) (Config, error) {
	v := viper.New()

	file := opts.File
	if file == "" && opts.Flags != nil {
		if f := opts.Flags.Lookup("config"); f != nil && f.Changed {
			file = f.Value.String()
		}
	}
	if file != "" {
		if err := readFile(v, file); err != nil {
			return Config{}, err
		}
	}

	setDefaults(v, Default())

	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	overlay, err := envOverlay(slices.Sorted(maps.Keys(knownKeys())), env)
	if err != nil {
		return Config{}, err
	}
	if err := v.MergeConfigMap(overlay); err != nil {
		return Config{}, fmt.Errorf("apply environment: %w", err)
	}

	if opts.Flags != nil {
		for _, f := range flagKeys {
			pf := opts.Flags.Lookup(f.flag)
			if pf == nil || !pf.Changed {
				continue
			}
			if err := v.BindPFlag(f.key, pf); err != nil {
				return Config{}, fmt.Errorf("bind flag --%s: %w", f.flag, err)
			}
		}
	}

	var c Config
	if err := v.UnmarshalExact(&c, withMillis); err != nil {
		return Config{}, fmt.Errorf("decode config: %w", tidyDecodeError(err))
	}
	if len(c.Cluster.Candidates) == 0 {
		c.Cluster.Candidates = nil // as in Default
	}
	return c, nil
}

// readFile reads the YAML file into v's config layer and refuses keys that
// are not configuration keys. It runs before the defaults are set, so
// v.AllKeys() is then exactly the file's keys.
func readFile(v *viper.Viper, file string) error {
	data, err := os.ReadFile(file) //nolint:gosec // G304: the operator names the configuration file
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("parse config file %s: %w", file, err)
	}
	known := knownKeys()
	var unknown []string
	for _, k := range v.AllKeys() {
		if known[k] {
			continue
		}
		if isParentKey(k, known) {
			continue // a section given as a scalar or empty; decoding reports the type error
		}
		unknown = append(unknown, strconv.Quote(k))
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		noun := "key"
		if len(unknown) > 1 {
			noun = "keys"
		}
		return fmt.Errorf("config file %s: unknown %s %s", file, noun, strings.Join(unknown, ", "))
	}
	return nil
}

// tidyDecodeError drops the "decoding failed due to the following error(s)"
// preamble mapstructure puts before several problems, keeping one line per
// problem (each names its key) and the wrapped errors.
func tidyDecodeError(err error) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		return errors.Join(joined.Unwrap()...)
	}
	return err
}

// setDefaults registers every key's default, so that AllKeys lists every key
// and a value given only in the environment reaches Unmarshal.
func setDefaults(v *viper.Viper, d Config) {
	v.SetDefault("node.id", d.Node.ID)
	v.SetDefault("node.data_dir", d.Node.DataDir)

	v.SetDefault("http.addr", d.HTTP.Addr)
	v.SetDefault("http.advertise", d.HTTP.Advertise)
	v.SetDefault("http.metrics_auth", d.HTTP.MetricsAuth)

	v.SetDefault("raft.addr", d.Raft.Addr)
	v.SetDefault("raft.advertise", d.Raft.Advertise)
	v.SetDefault("raft.heartbeat_timeout", d.Raft.HeartbeatTimeout)
	v.SetDefault("raft.election_timeout", d.Raft.ElectionTimeout)
	v.SetDefault("raft.leader_lease_timeout", d.Raft.LeaderLeaseTimeout)
	v.SetDefault("raft.commit_timeout", d.Raft.CommitTimeout)
	v.SetDefault("raft.snapshot_threshold", d.Raft.SnapshotThreshold)
	v.SetDefault("raft.snapshot_interval", d.Raft.SnapshotInterval)
	v.SetDefault("raft.trailing_logs", d.Raft.TrailingLogs)
	v.SetDefault("raft.max_append_entries", d.Raft.MaxAppendEntries)
	v.SetDefault("raft.grace", d.Raft.Grace)
	v.SetDefault("raft.batch_apply", d.Raft.BatchApply)
	v.SetDefault("raft.parallel_write", d.Raft.ParallelWrite)
	v.SetDefault("raft.log_cache", d.Raft.LogCache)
	v.SetDefault("raft.no_freelist_sync", d.Raft.NoFreelistSync)
	v.SetDefault("raft.max_batch", d.Raft.MaxBatch)
	v.SetDefault("raft.fast_failover", d.Raft.FastFailover)

	v.SetDefault("cluster.bootstrap", d.Cluster.Bootstrap)
	v.SetDefault("cluster.candidates", candidateMaps(d.Cluster.Candidates))

	v.SetDefault("tokens.file", d.Tokens.File)

	v.SetDefault("ports.reserved", slices.Clone(d.Ports.Reserved))
	v.SetDefault("ports.test.start", d.Ports.Test.Start)
	v.SetDefault("ports.test.end", d.Ports.Test.End)
	v.SetDefault("ports.offline.start", d.Ports.Offline.Start)
	v.SetDefault("ports.offline.end", d.Ports.Offline.End)

	v.SetDefault("log.level", d.Log.Level)
	v.SetDefault("log.format", d.Log.Format)
	v.SetDefault("log.access", d.Log.Access)

	v.SetDefault("tls.ca_file", d.TLS.CAFile)
	v.SetDefault("tls.cert_file", d.TLS.CertFile)
	v.SetDefault("tls.key_file", d.TLS.KeyFile)
	v.SetDefault("tls.verify_incoming_api", d.TLS.VerifyIncomingAPI)
	v.SetDefault("tls.allow_plaintext", d.TLS.AllowPlaintext)

	v.SetDefault("ttl.renew_slack", d.TTL.RenewSlack)
	v.SetDefault("ttl.renew_slack_max", d.TTL.RenewSlackMax)

	setLimitDefaults(v, d)
}

// knownKeys returns the set of every configuration key, as setDefaults registers them.
func knownKeys() map[string]bool {
	v := viper.New()
	setDefaults(v, Default())
	known := make(map[string]bool)
	for _, k := range v.AllKeys() {
		known[k] = true
	}
	return known
}

// isParentKey reports whether k is a section ("ports.test") of some known key.
func isParentKey(k string, known map[string]bool) bool {
	for key := range known {
		if strings.HasPrefix(key, k+".") {
			return true
		}
	}
	return false
}

// EnvVar returns the environment variable that sets key: EnvVar("http.addr")
// is "ELANOUS_HTTP_ADDR".
func EnvVar(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envOverlay turns the ELANOUS_* variables of env that name one of keys into
// a nested map to merge over the file. Scalars stay strings (viper's decoding
// converts them, durations included); the two lists are parsed here so a
// malformed value is reported with the variable's name.
func envOverlay(keys []string, env []string) (map[string]any, error) {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		if name, val, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, EnvPrefix+"_") {
			vars[name] = val
		}
	}
	overlay := make(map[string]any)
	var errs []error
	for _, key := range keys {
		name := EnvVar(key)
		raw, ok := vars[name]
		if !ok || raw == "" {
			continue
		}
		var val any = raw
		switch key {
		case "cluster.candidates":
			cands, err := parseCandidates(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			val = candidateMaps(cands)
		case "ports.reserved":
			ports, err := parsePorts(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			val = ports
		}
		setPath(overlay, strings.Split(key, "."), val)
	}
	return overlay, errors.Join(errs...)
}

// parseCandidates decodes a JSON array of {"machine","url","raft"} objects,
// refusing unknown fields and trailing data.
func parseCandidates(raw string) ([]Candidate, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var cands []Candidate
	if err := dec.Decode(&cands); err != nil {
		return nil, fmt.Errorf(`want a JSON array of {"machine","url","raft"} objects: %w`, err)
	}
	// Only the end may follow (dec.More would let a stray '}' or ']' through).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON array")
	}
	return cands, nil
}

// parsePorts decodes "31413,31414" or "[31413, 31414]".
func parsePorts(raw string) ([]int, error) {
	raw = strings.TrimSpace(raw)
	if strings.HasPrefix(raw, "[") {
		var ports []int
		if err := json.Unmarshal([]byte(raw), &ports); err != nil {
			return nil, fmt.Errorf("want a JSON array of ports: %w", err)
		}
		return ports, nil
	}
	var ports []int
	for _, field := range strings.Split(raw, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil {
			return nil, fmt.Errorf("want comma-separated ports: %q is not a number", field)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// candidateMaps converts candidates to the generic form a YAML file decodes
// to, so they merge and decode like the file's list.
func candidateMaps(cands []Candidate) []any {
	out := make([]any, 0, len(cands))
	for _, c := range cands {
		out = append(out, map[string]any{"machine": c.Machine, "url": c.URL, "raft": c.Raft})
	}
	return out
}

// setPath stores val at path in the nested map m, creating sections as needed.
func setPath(m map[string]any, path []string, val any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = make(map[string]any)
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = val
}

// withMillis adds to viper's decode hooks one that reads a duration key
// ("30s", or a time.Duration default) into a wire.Millis field, as it reads
// one into a time.Duration: limits.anonymous_wait is a duration in the
// configuration and whole milliseconds in wire.NodeLimits.
func withMillis(c *mapstructure.DecoderConfig) {
	millis := reflect.TypeFor[wire.Millis]()
	toMillis := func(from, to reflect.Type, data any) (any, error) {
		if to != millis {
			return data, nil
		}
		switch d := data.(type) {
		case time.Duration:
			return wire.MillisOf(d), nil
		case string:
			parsed, err := time.ParseDuration(d)
			if err != nil {
				return nil, err
			}
			return wire.MillisOf(parsed), nil
		}
		var d time.Duration // a bare number, as a time.Duration key reads it
		if err := mapstructure.WeakDecode(data, &d); err != nil {
			return nil, err
		}
		return wire.MillisOf(d), nil
	}
	c.DecodeHook = mapstructure.ComposeDecodeHookFunc(toMillis, c.DecodeHook)
}
