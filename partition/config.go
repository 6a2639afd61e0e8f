package partition

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/jetbus/jetbus"
)

// Defaults and limits of Config.
const (
	// DefaultTTL is the member TTL when Config.TTL is zero.
	DefaultTTL = 5 * time.Second
	// MinTTL is the shortest member TTL accepted.
	MinTTL = 500 * time.Millisecond
	// MaxMemberIDLength bounds Config.MemberID.
	MaxMemberIDLength = 64
)

var memberIDPattern = regexp.MustCompile(`^[A-Za-z0-9_=-]+$`)

// Config configures one member of a partitioned consumer group. The zero value of every field
// but Topic and Group is a usable default.
type Config struct {
	// Topic is the logical topic consumed (jetbus.ValidateTopic).
	Topic string
	// Group is the consumer group (jetbus.ValidateGroup).
	Group string
	// MemberID names this member in the group's bucket; it must be unique in the group and
	// match [A-Za-z0-9_=-]{1,64}. Default: a fresh UUIDv7, so a restarted process is a new
	// member.
	MemberID string
	// TTL is the member TTL, the one setting every timeout derives from (see Timeouts).
	// Every member of a group must use the same TTL: it is the MaxAge of the group's bucket.
	// Default DefaultTTL, at least MinTTL.
	TTL time.Duration
	// Replicas is the replica count of the KV buckets when this member creates them
	// (default 1; use 3 on a 3-node cluster). Existing buckets keep theirs.
	Replicas int
	// Version is reported in the member's metadata (e.g. the build version); optional.
	Version string
	// Fenced says the handler's effects are fenced or idempotent, so a partition may be
	// handled by its new owner while an owner that lost it is still finishing an event (a
	// transactional projection's conditional checkpoint, a changelog projection's version
	// guard). A crashed owner's partitions then resume once the server confirmed its
	// connection gone (about 2 s after its last heartbeat: see the package doc, "Liveness") or
	// its leases expired (TTL), instead of after its deliveries timed out (AckTimeout); the
	// Bus's take-over still returns those deliveries first, in order. Default false: no
	// partition is ever handled by two members at once.
	Fenced bool
	// Logger receives rebalancing and lease events; nil discards them.
	Logger *slog.Logger
}

// Timeouts are the durations derived from a Config's TTL.
//
//	Heartbeat    = min(TTL/3, 250ms)  a member rewrites its key this often
//	LeaseTTL     = TTL                a lease not renewed for this long expires on the server
//	Renew        = TTL/3              an owner renews each lease this often
//	Guard        = 4·TTL/5            an owner that has not renewed a lease for this long
//	                                  (counted from when its last successful renewal was
//	                                  sent) stops the partition itself, before the server
//	                                  can expire the lease and let the next owner in
//	Suspect      = 5·Heartbeat/4      a member whose key was not rewritten for this long is
//	                                  probed: is its connection still on the server?
//	Confirm      = ConfirmWindow      the server must report no subscription for it twice,
//	                                  this far apart, before it is taken for dead
//	Probe        = 500ms              how long a probe waits for its answer
//
// A member silent for TTL drops out of the member list (every watcher sees it expire); a
// member that stops gracefully leaves at once; a member whose connection the server confirms
// gone is removed by the others after Suspect + Confirm (see the package doc, "Liveness").
// Several missed heartbeats and two missed renewals are tolerated.
type Timeouts struct {
	Heartbeat time.Duration
	LeaseTTL  time.Duration
	Renew     time.Duration
	Guard     time.Duration
	Suspect   time.Duration
	Confirm   time.Duration
	Probe     time.Duration
}

// ConfirmWindow is how far apart the two probes that take a member for dead must be, each
// answered by the server with "no responders", for a member that does not advertise how long
// its reconnect takes (MemberInfo.Reconnect: an older version, or a custom reconnect delay):
// longer than a client's reconnect, so that a member reconnecting is not taken for dead. A
// member that advertises its reconnect gets that plus 250 ms instead (at least 500 ms): for
// jetbus's processes, which wait 250 ms plus up to 100 ms of jitter before trying a single
// server again, 600 ms; for nats.go's defaults (2 s, 100 ms), 2.35 s.
const ConfirmWindow = 1250 * time.Millisecond

// maxHeartbeat bounds the heartbeat interval: a crashed member is suspected this soon after its
// last heartbeat, whatever the TTL.
const maxHeartbeat = 250 * time.Millisecond

// Timeouts returns the durations derived from c.TTL (DefaultTTL when zero).
func (c Config) Timeouts() Timeouts {
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	hb := min(ttl/3, maxHeartbeat)
	return Timeouts{
		Heartbeat: hb,
		LeaseTTL:  ttl,
		Renew:     ttl / 3,
		Guard:     ttl * 4 / 5,
		Suspect:   hb * 5 / 4,
		Confirm:   ConfirmWindow,
		Probe:     500 * time.Millisecond,
	}
}

// Validate reports whether c is usable. Bad topic and group names wrap jetbus.ErrInvalidTopic
// and jetbus.ErrInvalidGroup; the other errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	if err := jetbus.ValidateTopic(c.Topic); err != nil {
		return err
	}
	if err := jetbus.ValidateGroup(c.Group); err != nil {
		return err
	}
	if c.MemberID != "" {
		if err := validateMemberID(c.MemberID); err != nil {
			return err
		}
	}
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < MinTTL) {
		return fmt.Errorf("%w: TTL must be at least %s, got %s", ErrInvalidConfig, MinTTL, c.TTL)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas must be between 0 and 5, got %d", ErrInvalidConfig, c.Replicas)
	}
	return nil
}

func validateMemberID(id string) error {
	if len(id) > MaxMemberIDLength || !memberIDPattern.MatchString(id) {
		return fmt.Errorf("%w: member ID %q must match %s and be at most %d bytes",
			ErrInvalidConfig, id, memberIDPattern, MaxMemberIDLength)
	}
	return nil
}

// withDefaults returns c validated with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.MemberID == "" {
		c.MemberID = newMemberID()
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func newMemberID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
