package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// SweeperConsumer is the durable consumer the safety net reads advisories with; every
// sweeper of the account shares it.
const SweeperConsumer = "jetbus-sweeper"

// ensureAdvisories creates the stream that captures MAX_DELIVERIES advisories. It must exist
// before a delivery gives out, or the advisory is gone: Open creates it.
func (q *Queue) ensureAdvisories(ctx context.Context) error {
	err := q.ensureStream(ctx, natsjs.StreamConfig{
		Name:        AdvisoryStreamName,
		Description: "jetbus: deliveries the server gave up on, for the dead-letter safety net",
		Subjects:    []string{AdvisorySubjects},
		Retention:   natsjs.WorkQueuePolicy,
		Replicas:    q.cfg.Replicas,
		MaxAge:      q.cfg.MaxAge,
	})
	if err != nil {
		return fmt.Errorf("dlq: stream %s: %w", AdvisoryStreamName, retry.Opaque(err))
	}
	return nil
}

// maxDeliveriesAdvisory is JetStream's io.nats.jetstream.advisory.v1.max_deliver.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// RunSweeper moves the messages that JetStream stopped delivering (MAX_DELIVERIES
// advisories: a handler that crashed, hung or timed out on every attempt, or a last attempt
// whose DLQ publish failed) into the DLQ with reason "max-deliveries", until ctx is done. An
// advisory whose DLQ publish fails is tried again after `every` (default 1s), so such events
// land once the DLQ is back. Run one or more per account (the bridge does).
func (q *Queue) RunSweeper(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = time.Second
	}
	cons, err := q.js.CreateOrUpdateConsumer(ctx, AdvisoryStreamName, natsjs.ConsumerConfig{
		Durable:       SweeperConsumer,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 100,
	})
	if err != nil {
		return fmt.Errorf("dlq: sweeper consumer: %w", retry.Opaque(err))
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("dlq: sweeper: %w", retry.Opaque(err))
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	watched := make(chan struct{})
	go func() { defer close(watched); q.watchLimits(ctx, every) }()
	defer func() { <-watched }()
	for {
		m, err := it.Next()
		if errors.Is(err, natsjs.ErrMsgIteratorClosed) {
			return ctx.Err()
		} else if err != nil {
			q.log.Warn("sweeper pull failed", "err", err)
			continue
		}
		if err := q.sweep(ctx, m.Data()); err != nil {
			q.log.Warn("sweeper could not move a message yet", "err", err)
			_ = m.NakWithDelay(every)
			continue
		}
		_ = m.Ack()
	}
}

// sweep moves the message an advisory points to.
func (q *Queue) sweep(ctx context.Context, data []byte) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.Stream == "" {
		q.log.Error("sweeper: unreadable advisory dropped", "err", err, "advisory", string(data))
		return nil
	}
	// Anyone who may publish on the advisory subjects can forge an advisory: nothing is read
	// from a stream that is not a topic's, and nothing is copied before the server confirms
	// that a jetbus consumer of that topic gave up on that very message.
	if adv.Stream == StreamName || adv.Stream == AdvisoryStreamName || strings.HasPrefix(adv.Stream, "KV_") || strings.HasPrefix(adv.Stream, "OBJ_") {
		q.refuseAdvisory(adv, "not a topic's stream")
		return nil
	}
	s, err := q.js.Stream(ctx, adv.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		q.log.Error("sweeper: stream of an advisory is gone", "stream", adv.Stream, "seq", adv.StreamSeq)
		return nil
	} else if err != nil {
		return err
	}
	raw, err := s.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		q.log.Error("sweeper: message of an advisory is gone (aged out or deleted)", "stream", adv.Stream, "seq", adv.StreamSeq)
		return nil
	} else if err != nil {
		return err
	}
	topic, partition, tok, ok := jetbus.ParseSubject(raw.Subject)
	if !ok || jetbus.StreamName(topic) != adv.Stream {
		q.refuseAdvisory(adv, "the message is not an event of a topic's stream")
		return nil
	}
	if why, err := q.confirm(ctx, s, adv, partition); err != nil {
		return err
	} else if why != "" {
		q.refuseAdvisory(adv, why)
		return nil
	}
	key := raw.Header.Get(jetbus.HeaderKey)
	if key == "" && tok != "" {
		key, _ = jetbus.ParseKeyToken(tok)
	}
	id := raw.Header.Get(jetbus.HeaderMsgID)
	if id == "" {
		id = adv.Stream + ":" + strconv.FormatUint(adv.StreamSeq, 10)
	}
	o := &origin{
		topic:    topic,
		group:    groupOf(adv.Consumer),
		subject:  raw.Subject,
		stream:   adv.Stream,
		seq:      adv.StreamSeq,
		id:       id,
		key:      key,
		header:   nats.Header(raw.Header),
		data:     raw.Data,
		attempts: adv.Deliveries,
		reason:   ReasonMaxDeliveries,
		errMsg:   fmt.Sprintf("the server stopped delivering after %d deliveries without an acknowledgement", adv.Deliveries),
	}
	_, err = q.store(ctx, o)
	return err
}

// groupOf returns the group of a partition consumer "<group>_p<n>", or the consumer's name.
func groupOf(consumer string) string {
	i := strings.LastIndex(consumer, "_p")
	if i <= 0 {
		return consumer
	}
	if _, err := strconv.Atoi(consumer[i+2:]); err != nil {
		return consumer
	}
	return consumer[:i]
}

// confirm asks the server whether adv is true: its consumer is the jetbus consumer of the
// message's partition, it delivered the message at least MaxDeliver times, and the message
// is not acknowledged. It returns why not, or "".
func (q *Queue) confirm(ctx context.Context, s natsjs.Stream, adv maxDeliveriesAdvisory, partition int) (string, error) {
	group := groupOf(adv.Consumer)
	if group == adv.Consumer || jetbus.ConsumerName(group, partition) != adv.Consumer {
		return "not the jetbus consumer of the message's partition", nil
	}
	c, err := s.Consumer(ctx, adv.Consumer)
	if errors.Is(err, natsjs.ErrConsumerNotFound) {
		return "no such consumer", nil
	} else if err != nil {
		return "", err
	}
	info := c.CachedInfo()
	switch {
	case info.Config.MaxDeliver <= 0 || adv.Deliveries < info.Config.MaxDeliver:
		return fmt.Sprintf("the consumer delivers up to %d times, the advisory says %d", info.Config.MaxDeliver, adv.Deliveries), nil
	case info.Delivered.Stream < adv.StreamSeq:
		return "the consumer has not delivered the message", nil
	case info.AckFloor.Stream >= adv.StreamSeq:
		return "the consumer acknowledged the message", nil
	}
	return "", nil
}

// refuseAdvisory drops an advisory the server does not confirm, counted and logged (at
// warn at most every 10 s: a flood of forged ones costs a counter, not a line each).
func (q *Queue) refuseAdvisory(adv maxDeliveriesAdvisory, why string) {
	q.metrics.advisoryRefused()
	level := slog.LevelDebug
	if now, last := time.Now().UnixNano(), q.advLog.Load(); now-last >= int64(10*time.Second) && q.advLog.CompareAndSwap(last, now) {
		level = slog.LevelWarn
	}
	q.log.Log(context.Background(), level, "sweeper: advisory not confirmed by the server, nothing moved (forged, or out of date)",
		"why", why, "stream", adv.Stream, "consumer", adv.Consumer, "seq", adv.StreamSeq)
}

// watchLimits reports, every interval until ctx ends, the letters the DLQ's streams dropped
// at their limits (Config.MaxAge and MaxBytes for StreamName, Config.Rejects for
// RejectsStreamName): dlq_dropped_by_limit_total{stream,limit} and a warning (at most every
// 10 s per stream). The server says nothing when it drops them, so they are inferred: the
// letters gone from the head between two looks while the stream was at its byte limit
// (limit "max_bytes"), or whose oldest letter had reached the age limit ("max_age"). A replay
// or a discard of the oldest letters at that moment counts too; it is an alarm, not an audit.
// Refusals aging out of RejectsStreamName is how that stream is meant to work: counted, logged
// at debug only; refusals dropped at its byte limit (a flood) are warned about.
func (q *Queue) watchLimits(ctx context.Context, every time.Duration) {
	type watched struct {
		stream    string
		maxAge    time.Duration
		maxBytes  int64
		keys      string // the configuration's, for the warning
		prev      *natsjs.StreamState
		lastLog   time.Time
		lastDebug time.Time
	}
	var ws []*watched
	if q.cfg.MaxAge > 0 || q.cfg.MaxBytes > 0 {
		ws = append(ws, &watched{stream: StreamName, maxAge: q.cfg.MaxAge, maxBytes: q.cfg.MaxBytes, keys: "dlq.max_bytes or dlq.max_age"})
	}
	if q.cfg.Rejects.MaxAge > 0 || q.cfg.Rejects.MaxBytes > 0 {
		ws = append(ws, &watched{stream: RejectsStreamName, maxAge: q.cfg.Rejects.MaxAge, maxBytes: q.cfg.Rejects.MaxBytes,
			keys: "dlq.rejects.max_bytes or dlq.rejects.max_age"})
	}
	if len(ws) == 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, w := range ws {
			s, err := q.js.Stream(ctx, w.stream)
			if err != nil {
				w.prev = nil
				continue
			}
			st := s.CachedInfo().State
			if prev := w.prev; prev != nil && st.FirstSeq > prev.FirstSeq {
				atBytes := w.maxBytes > 0 && st.Bytes >= uint64(w.maxBytes)*9/10
				atAge := w.maxAge > 0 && time.Since(prev.FirstTime) >= w.maxAge
				gone := int64(prev.Msgs) + int64(st.LastSeq-prev.LastSeq) - int64(st.Msgs)
				if (atBytes || atAge) && gone > 0 {
					limit := "max_age"
					if atBytes {
						limit = "max_bytes"
					}
					q.metrics.droppedByLimit(w.stream, limit, float64(gone))
					attrs := []any{"stream", w.stream, "dropped", gone, "limit", limit, "bytes", st.Bytes, "max_bytes", w.maxBytes, "max_age", w.maxAge.String()}
					switch {
					case w.stream == RejectsStreamName && !atBytes:
						// Refusals reaching dlq.rejects.max_age: the stream working as meant.
						if time.Since(w.lastDebug) >= 10*time.Second {
							w.lastDebug = time.Now()
							q.log.Debug("dlq: refusals aged out of "+w.stream, attrs...)
						}
					case time.Since(w.lastLog) >= 10*time.Second:
						w.lastLog = time.Now()
						q.log.Warn("dlq: letters dropped at the limit of "+w.stream+": raise "+w.keys+", or replay and discard", attrs...)
					}
				}
			}
			w.prev = &st
		}
	}
}
