package schema

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jetbus/jetbus"
)

// Option configures Open.
type Option func(*options) error

type options struct {
	bucket    string
	replicas  int
	strict    bool
	mode      Mode
	policy    Policy
	log       *slog.Logger
	upcasters []goUpcaster
	resync    time.Duration
}

// DefaultResyncInterval is how often a Registry checks that its watch is current.
const DefaultResyncInterval = time.Second

type goUpcaster struct {
	topic string
	from  int
	fn    Upcaster
}

// WithBucket sets the KV bucket of the registry (default DefaultBucket).
func WithBucket(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("%w: empty bucket name", jetbus.ErrInvalidOption)
		}
		o.bucket = name
		return nil
	}
}

// WithReplicas sets the replicas of the bucket when Open creates it (default 1).
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas must be 1 to 5, got %d", jetbus.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}

// WithStrict makes the publish middleware refuse topics without a schema (ErrNoSchema).
func WithStrict() Option {
	return func(o *options) error { o.strict = true; return nil }
}

// WithDefaultMode sets the mode of topics with no mode of their own (default BACKWARD).
func WithDefaultMode(m Mode) Option {
	return func(o *options) error {
		p, err := ParseMode(string(m))
		o.mode = p
		return err
	}
}

// WithPolicy sets the policy of topics with no policy of their own (default STRICT).
func WithPolicy(p Policy) Option {
	return func(o *options) error {
		q, err := ParsePolicy(string(p))
		o.policy = q
		return err
	}
}

// WithUpcaster adds a Go upcaster from version from to from+1 of topic (see AddUpcaster).
func WithUpcaster(topic string, from int, fn Upcaster) Option {
	return func(o *options) error {
		o.upcasters = append(o.upcasters, goUpcaster{topic: topic, from: from, fn: fn})
		return nil
	}
}

// WithResyncInterval sets how often the Registry compares its watch with the bucket and
// restarts a watch that stalled (default DefaultResyncInterval, at least 10ms). It bounds how
// stale a process's view can get while its connection is up: about two intervals.
func WithResyncInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: resync interval must be at least 10ms, got %s", jetbus.ErrInvalidOption, d)
		}
		o.resync = d
		return nil
	}
}

// WithLogger sets the logger (nil: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}
