package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/mongoname"
	"github.com/jetbus/jetbus/snapshotapi"
)

// checks are the named checks of the check tag. Each gets a non-empty string (a scalar, a list
// element, or a map key).
var checks = map[string]func(string) error{
	"topic": jetbus.ValidateTopic,
	"group": jetbus.ValidateGroup,
	"name":  matches(namePattern, "a name"),
	"topic-template": func(s string) error {
		return jetbus.ValidateTopic(strings.NewReplacer("{collection}", "x", "{database}", "x").Replace(s))
	},
	"nats-url": func(s string) error {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%q is not a URL such as nats://host:4222", s)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
			return nil
		}
		return fmt.Errorf("%q: scheme must be nats, tls, ws or wss", s)
	},
	"mongo-uri": func(s string) error {
		if !strings.HasPrefix(s, "mongodb://") && !strings.HasPrefix(s, "mongodb+srv://") {
			return errors.New("must start with mongodb:// or mongodb+srv://")
		}
		return nil
	},
	"database":   mongoname.Database,   // the rule changefeed, projection and snapshotapi apply
	"collection": mongoname.Collection, // likewise
	"addr": func(s string) error {
		if _, port, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%q is not host:port", s)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%q: bad port", s)
		}
		return nil
	},
	"json-pointer": func(s string) error {
		if !strings.HasPrefix(s, "/") {
			return fmt.Errorf("%q is not a JSON pointer (e.g. /version)", s)
		}
		return nil
	},
	"field": snapshotapi.ValidateField, // the rule snapshotapi.Config.Validate applies to a view's fields
	"index-field": func(s string) error {
		return mongoname.FieldPath(strings.TrimPrefix(s, "-")) // the rule projection.Config.Validate applies
	},
	"pipeline": func(s string) error {
		if !strings.HasPrefix(s, "$") {
			return fmt.Errorf("%q is not an aggregation stage (e.g. $match)", s)
		}
		return nil
	},
	"reply-prefix": func(s string) error {
		return ingress.ValidateReplyPrefix(s) // the rule ingress.Config.Validate applies
	},
	"inbox-prefix": func(s string) error {
		// nats.CustomInboxPrefix's rule, and a subject space that is not JetStream's or the system's.
		if strings.ContainsAny(s, " \t\r\n*>") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") || strings.HasPrefix(s, "$") {
			return fmt.Errorf("%q is not an inbox prefix: subject tokens without wildcards, not starting with $ nor ending in a dot (e.g. _INBOX_bridge)", s)
		}
		return nil
	},
	"otlp-url": func(s string) error {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q is not a URL such as http://otel-collector:4318 (http or https, no query)", s)
		}
		return nil
	},
	"baggage-key": func(s string) error {
		if jetbus.ValidateBaggageKey(s) != nil {
			return fmt.Errorf("%q is not a baggage key: letters, digits and !#$%%&'*+-.^_`|~ (an RFC 7230 token)", s)
		}
		return nil
	},
	"path": func(string) error { return nil }, // resolved against the file's directory
	"dir":  func(string) error { return nil }, // resolved, then checked by Load
}

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

func matches(re *regexp.Regexp, what string) func(string) error {
	return func(s string) error {
		if !re.MatchString(s) {
			return fmt.Errorf("%q is not %s (%s)", s, what, re)
		}
		return nil
	}
}

func runCheck(name, s string) error {
	c, ok := checks[name]
	if !ok {
		panic("config: unknown check " + name)
	}
	return c(s)
}

// ByteSize is a size in bytes, written as a number with an optional unit: B, KB, MB, GB
// (powers of 1000) or KiB, MiB, GiB (powers of 1024).
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize parses a size such as 512KiB, 1MB or 1048576.
func ParseByteSize(s string) (ByteSize, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("want a size such as 512KiB, 1MiB or 1048576, got %q", s)
	}
	return ByteSize(n * mult), nil
}
