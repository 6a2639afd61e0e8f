package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/jetbus/jetbus/internal/config"
)

// Enum is a string flag that accepts one of a fixed set of values (or "" when empty is
// allowed), refusing others while the command line is parsed.
type Enum struct {
	Value   string
	Allowed []string
}

func (e *Enum) String() string { return e.Value }
func (e *Enum) Type() string   { return "string" }
func (e *Enum) Set(s string) error {
	if !slices.Contains(e.Allowed, s) {
		return fmt.Errorf("must be one of %s", strings.Join(e.Allowed, ", "))
	}
	e.Value = s
	return nil
}

// EnumFlag adds an Enum flag to cmd, with shell completion of its values.
func EnumFlag(cmd *cobra.Command, name, def, usage string, allowed ...string) *Enum {
	e := &Enum{Value: def, Allowed: allowed}
	cmd.Flags().Var(e, name, usage+" ("+strings.Join(allowed, ", ")+")")
	_ = cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return allowed, cobra.ShellCompDirectiveNoFileComp
	})
	return e
}

// Time is a flag holding an instant: RFC 3339, or a duration ago (2h, 30m, 7d).
type Time struct {
	T   time.Time
	now func() time.Time
}

func (t *Time) String() string {
	if t.T.IsZero() {
		return ""
	}
	return t.T.Format(time.RFC3339)
}
func (t *Time) Type() string { return "time" }
func (t *Time) Set(s string) error {
	now := time.Now
	if t.now != nil {
		now = t.now
	}
	if d, err := parseAgo(s); err == nil {
		if d < 0 {
			return errors.New("a duration ago must not be negative")
		}
		// Without the monotonic reading, so it prints as a plain time.
		t.T = now().Add(-d).Round(0).UTC().Truncate(time.Millisecond)
		return nil
	}
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (2h, 30m, 7d)")
	}
	t.T = v
	return nil
}

func parseAgo(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(d, "%d", &n); err != nil || fmt.Sprint(n) != d {
			return 0, errors.New("bad days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// annConn marks the connection flags, which README lists once.
const annConn = "jetbus_connection"

// Conn are the flags of every command that reads the configuration or connects: --config and
// the NATS, MongoDB, HTTP and log settings that override it.
type Conn struct {
	cmd      *cobra.Command
	File     string
	NATS     []string
	flags    map[string]*string
	Level    *Enum
	withHTTP bool
}

// connFlags maps each string flag to its configuration key.
var connFlags = []struct{ flag, path, usage string }{
	{"nats-creds", "nats.creds", "NATS user credentials file"},
	{"nats-nkey", "nats.nkey", "NATS NKey seed file"},
	{"nats-user", "nats.user", "NATS user (with --nats-password)"},
	{"nats-password", "nats.password", "NATS password"},
	{"nats-token", "nats.token", "NATS authentication token"},
	{"tls-ca", "nats.tls.ca", "CA certificate (PEM) to verify the NATS servers"},
	{"tls-cert", "nats.tls.cert", "client certificate (PEM) for mutual TLS, with --tls-key"},
	{"tls-key", "nats.tls.key", "client private key (PEM)"},
	{"mongo-uri", "mongo.uri", "MongoDB connection string"},
	{"http-addr", "http.addr", "listen address of the HTTP server (/healthz, /readyz, /metrics, /v1/ops/status)"},
}

// ConnFlags adds the connection flags to cmd; withHTTP adds --http-addr (processes).
func ConnFlags(cmd *cobra.Command, withHTTP bool) *Conn {
	c := &Conn{cmd: cmd, flags: map[string]*string{}, withHTTP: withHTTP}
	fs := cmd.Flags()
	fs.StringVar(&c.File, "config", "", "configuration file (YAML; see docs/config.md)")
	fs.StringSliceVar(&c.NATS, "nats-url", nil, "NATS server URL; repeat it or separate with commas (default nats://127.0.0.1:4222)")
	for _, f := range connFlags {
		if f.flag == "http-addr" && !withHTTP {
			continue
		}
		c.flags[f.flag] = fs.String(f.flag, "", f.usage)
	}
	c.Level = EnumFlag(cmd, "log-level", "", "lowest level logged (default info)", "debug", "info", "warn", "error")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	for _, n := range []string{"nats-creds", "nats-nkey", "tls-ca", "tls-cert", "tls-key"} {
		_ = cmd.MarkFlagFilename(n)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "nats-url" || f.Name == "log-level" || c.flags[f.Name] != nil {
			if f.Annotations == nil {
				f.Annotations = map[string][]string{}
			}
			f.Annotations[annConn] = []string{"true"}
		}
	})
	return c
}

// Load reads the configuration: --config's file, the environment, then the flags that were
// set. Errors located at a flag are usage errors.
func (c *Conn) Load() (*config.Config, error) {
	var ov []config.Override
	fs := c.cmd.Flags()
	if fs.Changed("nats-url") {
		ov = append(ov, config.Override{Path: "nats.urls", Value: c.NATS, Flag: "--nats-url"})
	}
	for _, f := range connFlags {
		if p, ok := c.flags[f.flag]; ok && fs.Changed(f.flag) {
			ov = append(ov, config.Override{Path: f.path, Value: *p, Flag: "--" + f.flag})
		}
	}
	if fs.Changed("log-level") {
		ov = append(ov, config.Override{Path: "log.level", Value: c.Level.Value, Flag: "--log-level"})
	}
	cfg, err := config.Load(config.Options{File: c.File, Environ: os.Environ(), Flags: ov})
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			if !strings.HasPrefix(e.Source, "flag ") {
				return nil, err
			}
		}
		return nil, &UsageError{Err: err}
	}
	return cfg, err
}
