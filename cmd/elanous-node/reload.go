package main

import (
	"log/slog"

	"github.com/elanous/elanous-node/config"
)

// reload is what serve does on SIGHUP: it reads the configuration again
// (load) and applies, each on its own, the log level (into level), the
// certificate files (new handshakes use them; a set that does not pass the
// checks of a start is refused and the old one kept) and tokens.json (the
// cluster tokens are swapped at once). Nothing else changes: no restart, no
// Raft call, so no leader change. A configuration that no longer loads keeps
// the log level and reloads the files from the paths in use.
func (c *candidate) reload(load func() (config.Config, error), level *slog.LevelVar) {
	c.log.Info("SIGHUP: reloading certificates, tokens and log level")
	cfg, err := load()
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		c.log.Error("reload: the configuration does not load; the log level stays, files reload from the paths in use", "err", err)
		cfg = c.cfg
	} else {
		var l slog.Level
		if err := l.UnmarshalText([]byte(cfg.Log.Level)); err == nil && l != level.Level() {
			level.Set(l)
			c.log.Info("reload: log level set", "level", l.String())
		}
		if cfg.TLS.CAFile != c.cfg.TLS.CAFile || cfg.TLS.CertFile != c.cfg.TLS.CertFile || cfg.TLS.KeyFile != c.cfg.TLS.KeyFile {
			c.log.Warn("reload: tls file paths changed; the files in use are reloaded, restart to use the new paths")
		}
	}
	if c.certs != nil {
		if err := c.certs.Reload(); err != nil {
			c.log.Error("reload: certificates not reloaded; the ones in use are kept", "err", err)
		} else {
			c.log.Info("reload: certificates reloaded")
			logCertificate(c.log, c.certs)
		}
	}
	tokens, err := readTokensFile(cfg.TokensFile())
	if err != nil {
		c.log.Error("reload: tokens file not reloaded; the tokens in use are kept", "err", err)
		return
	}
	c.api.SetTokens(tokens)
	c.log.Info("reload: cluster tokens reloaded", "file", cfg.TokensFile())
}
