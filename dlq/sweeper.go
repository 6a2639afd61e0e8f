package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	if adv.Stream == StreamName || adv.Stream == AdvisoryStreamName {
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
	topic, _, tok, ok := jetbus.ParseSubject(raw.Subject)
	if !ok {
		topic = raw.Subject
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
