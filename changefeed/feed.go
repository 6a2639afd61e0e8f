package changefeed

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Feed publishes one MongoDB change stream into topics. It is a process component: Name,
// Run, Ready and Status. Every method is safe for concurrent use.
type Feed struct {
	*runner
	cfg     Config
	bus     Publisher
	client  *mongo.Client
	pos     *positions
	headers headerCache // used by the serving goroutine only
}

// New returns the feed cfg describes, publishing through bus and reading MongoDB through
// client. It opens the position bucket (PositionBucket) and the feed's lease bucket. Options:
//
//   - WithLogger: logger (default discard).
//   - WithRegisterer: Prometheus registerer for the feed's metrics (default none).
//   - WithDeadLetters: the DLQ for changes that can never be published (default none: such
//     a change stops the feed until it can be published).
//
// Feeds and drainers that share bus need its bound on outstanding async publishes
// (jetstream.WithAsyncMaxPending) to hold their MaxInFlight together.
func New(ctx context.Context, bus Publisher, client *mongo.Client, cfg Config, opts ...Option) (*Feed, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o, log, m, err := prepare(bus, client, opts, "feed", "changefeed_", cfg.Name)
	if err != nil {
		return nil, err
	}
	js := bus.JetStream()
	pos, err := openPositions(ctx, js, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	lease, err := openLease(ctx, js, "changefeed", cfg.Name, cfg.MemberID, cfg.LeaseTTL, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	r := &runner{
		what: "changefeed " + cfg.Name, log: log, metrics: m, lease: lease,
		send:  &sender{bus: bus, dlq: o.dlq, by: "changefeed-" + cfg.Name, source: "changefeed." + cfg.Name, templated: cfg.templated(), log: log},
		state: runnerState{role: RoleStarting},
	}
	f := &Feed{runner: r, cfg: cfg, bus: bus, client: client, pos: pos}
	if err := registerPositionAge(o.Registerer, cfg.Name, f.positionAge); err != nil {
		return nil, err
	}
	return f, nil
}

// Name returns "changefeed/<name>", the component's name.
func (f *Feed) Name() string { return "changefeed/" + f.cfg.Name }

// Config returns the feed's configuration with its defaults filled in.
func (f *Feed) Config() Config { return f.cfg }

// Run runs the feed until ctx ends: a hot standby while another runner holds the feed's
// lease, the active runner once it takes it. On ctx's end it stops reading, waits for the
// publishes in flight, saves its position and releases the lease. It returns nil then; it
// never gives up by itself (failures are retried, or reported by Ready while it waits).
func (f *Feed) Run(ctx context.Context) error {
	f.loop(ctx, f.serve)
	return nil
}

// Ready reports whether the feed does its job: nil for a standby and for an active runner
// making progress; ErrHistoryLost or ErrFeedFailed (wrapped) while it is failed; the last
// error when it has not made progress for 30 seconds.
func (f *Feed) Ready(context.Context) error { return f.ready() }

// Status is what /v1/ops/status shows of a feed.
type Status struct {
	Feed   string `json:"feed"`
	Role   string `json:"role"`
	Member string `json:"member"`
	// Owner is the runner holding the lease (this one when active).
	Owner     string `json:"owner,omitempty"`
	Namespace string `json:"namespace"`
	Topic     string `json:"topic"`
	// Position is the saved position: by this runner when active, read from KV otherwise.
	Position     *Position `json:"position,omitempty"`
	Published    uint64    `json:"published"`
	DeadLettered uint64    `json:"dead_lettered"`
	// Duplicates counts re-publishes the server already had (after a restart).
	Duplicates uint64 `json:"duplicates"`
	// LagSeconds is now minus the cluster time of the last change read (active runner).
	LagSeconds float64 `json:"lag_seconds,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// Status reports the feed's role and position (a process.Statuser).
func (f *Feed) Status(ctx context.Context) (any, error) {
	s := f.snapshot()
	st := Status{
		Feed: f.cfg.Name, Role: s.role, Member: f.lease.member(), Owner: s.owner,
		Namespace: namespaceOf(f.cfg.Database, f.cfg.Collection), Topic: f.cfg.Topic,
		Position: s.saved, Published: s.published, DeadLettered: s.deadLettered, Duplicates: s.duplicates, Error: s.errorText(),
	}
	if !s.lastChange.IsZero() && s.role == RoleActive {
		st.LagSeconds = max(0, time.Since(s.lastChange).Seconds())
	}
	if st.Role != RoleActive && st.Role != RoleFailed {
		p, _, err := f.pos.load(ctx, f.cfg.Name)
		if err != nil {
			return st, err
		}
		st.Position = p
	}
	return st, nil
}

func namespaceOf(db, coll string) string {
	switch {
	case db == "":
		return "*"
	case coll == "":
		return db + ".*"
	}
	return db + "." + coll
}

// positionAge is now minus the cluster time of the saved position, for an active (or failed)
// runner; 0 otherwise.
func (f *Feed) positionAge() float64 {
	s := f.snapshot()
	if (s.role != RoleActive && s.role != RoleFailed) || s.saved == nil {
		return 0
	}
	t := s.saved.ClusterTime.Time()
	if t.IsZero() {
		t = s.saved.Saved
	}
	return max(0, time.Since(t).Seconds())
}
