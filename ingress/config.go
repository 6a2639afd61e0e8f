package ingress

import (
	"fmt"
	"strings"
	"time"

	"github.com/jetbus/jetbus"
)

// Names on the wire.
const (
	// SubjectPrefix starts every ingress subject: a client publishes topic T's events to
	// "in.T".
	SubjectPrefix = "in."
	// Subject is what ingress subscribes to.
	Subject = SubjectPrefix + ">"
	// ServiceName is the NATS micro service name ($SRV.PING.jetbus-ingress, …) and QueueGroup
	// the queue group every replica subscribes in, so that each message reaches one replica.
	ServiceName = "jetbus-ingress"
	QueueGroup  = "jetbus-ingress"
	// ServiceVersion is the version of the ingress protocol, as $SRV.INFO reports it.
	ServiceVersion = "1.0.0"
	// EndpointName is the name of the service's one endpoint in $SRV.INFO and $SRV.STATS.
	EndpointName = "publish"
)

// Defaults of Config.
const (
	DefaultMaxMessageSize = 1 << 20
	DefaultMaxInFlight    = 1000
	DefaultPendingMsgs    = 65536
	DefaultPendingBytes   = 64 << 20
	DefaultAckTimeout     = 5 * time.Second
	DefaultDrainTimeout   = 10 * time.Second
	DefaultTSWindow       = 24 * time.Hour
)

// DefaultReplyPrefixes are the reply subjects ingress answers when Config.ReplyPrefixes is
// empty: NATS inboxes, "_INBOX." and custom prefixes such as "_INBOX_app.".
var DefaultReplyPrefixes = []string{"_INBOX"}

// Config configures ingress. Allow is required; the zero value of every other field is a
// usable default.
type Config struct {
	// Allow lists the topics clients may publish to, each as "in.<topic>".
	Allow []string
	// MaxMessageSize is the largest payload accepted, in bytes (default 1 MiB); larger ones
	// are refused with CodeTooLarge.
	MaxMessageSize int
	// MaxInFlight bounds the messages ingress holds at once: publishes awaiting JetStream's
	// acknowledgement, retries and dead letters being written (default 1000). At the bound,
	// ingress stops taking messages off the subscription until one settles. The Publisher's
	// own bound on pending async publishes must be at least this.
	MaxInFlight int
	// PendingMsgs and PendingBytes bound the subscription's buffer of messages received and
	// not yet taken (defaults 65536 and 64 MiB). Beyond either, NATS drops what arrives (a
	// slow consumer): counted in ingress_dropped_total and logged. Past half of PendingBytes,
	// ingress sheds the largest messages first (package doc, "Shedding").
	PendingMsgs  int
	PendingBytes int
	// AckTimeout bounds one wait for JetStream's acknowledgement (default 5s). A request
	// whose publish is not acknowledged in time is answered CodeUnavailable with the event
	// ID, so that the client can retry without storing it twice.
	AckTimeout time.Duration
	// DrainTimeout bounds the shutdown: taking what the subscription buffered, waiting for
	// acknowledgements, retrying and dead-lettering (default 10s).
	DrainTimeout time.Duration
	// ReplyPrefixes are the subject prefixes ingress replies to (default DefaultReplyPrefixes).
	// A request whose reply subject matches none is refused (CodeNotAllowed) and
	// dead-lettered: ingress never publishes to a subject a client picked unless it is an
	// inbox.
	ReplyPrefixes []string
	// TSWindow bounds a client's x-ts: at most this far from the bridge's clock, before or
	// after (default DefaultTSWindow). Further is refused with CodeReservedHeader: an event
	// time years away would skew every reader's notion of when things happened.
	TSWindow time.Duration
}

// Validate reports whether c is usable. Its errors wrap ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	if len(c.Allow) == 0 {
		return fmt.Errorf("%w: Allow must list at least one topic", ErrInvalidConfig)
	}
	for i, t := range c.Allow {
		if err := jetbus.ValidateTopic(t); err != nil {
			return fmt.Errorf("%w: Allow[%d]: %v", ErrInvalidConfig, i, err)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxMessageSize", c.MaxMessageSize}, {"MaxInFlight", c.MaxInFlight},
		{"PendingMsgs", c.PendingMsgs}, {"PendingBytes", c.PendingBytes},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s must not be negative, got %d", ErrInvalidConfig, f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"AckTimeout", c.AckTimeout}, {"DrainTimeout", c.DrainTimeout}, {"TSWindow", c.TSWindow}} {
		if f.v < 0 || (f.v > 0 && f.v < time.Millisecond) {
			return fmt.Errorf("%w: %s must be at least 1ms (0: default), got %s", ErrInvalidConfig, f.name, f.v)
		}
	}
	for i, p := range c.ReplyPrefixes {
		if err := ValidateReplyPrefix(p); err != nil {
			return fmt.Errorf("%w: ReplyPrefixes[%d]: %v", ErrInvalidConfig, i, err)
		}
	}
	return nil
}

// ValidateReplyPrefix reports whether p may be a reply prefix: not empty, no whitespace or
// wildcards, and not a subject space that is never an inbox (system and JetStream APIs
// "$…", ingress "in.", dead letters "dlq." and refusals "dlq_rejects.").
func ValidateReplyPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty prefix")
	case strings.ContainsAny(p, " \t\r\n*>"):
		return fmt.Errorf("%q holds whitespace or a wildcard", p)
	case strings.HasPrefix(p, "$"), strings.HasPrefix(p, SubjectPrefix), strings.HasPrefix(p, "dlq."), strings.HasPrefix(p, "dlq_rejects."):
		return fmt.Errorf("%q is not an inbox prefix: system, JetStream, ingress and DLQ subjects are never replied to", p)
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.MaxMessageSize, DefaultMaxMessageSize)
	set(&c.MaxInFlight, DefaultMaxInFlight)
	set(&c.PendingMsgs, DefaultPendingMsgs)
	set(&c.PendingBytes, DefaultPendingBytes)
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.TSWindow == 0 {
		c.TSWindow = DefaultTSWindow
	}
	if len(c.ReplyPrefixes) == 0 {
		c.ReplyPrefixes = DefaultReplyPrefixes
	}
	c.Allow = append([]string(nil), c.Allow...)
	c.ReplyPrefixes = append([]string(nil), c.ReplyPrefixes...)
	return c, nil
}
