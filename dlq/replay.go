package dlq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/internal/retry"
)

// Publisher is the publish path Replay republishes through (a jetbus.Bus).
type Publisher interface {
	Publish(ctx context.Context, topic string, payload any, opts ...jetbus.PublishOption) (*jetbus.Event, error)
}

// ReplayOptions selects and shapes a replay.
type ReplayOptions struct {
	Filter Filter
	// Transform, if set, returns the body to republish (e.g. a fixed or upcast payload).
	// Returning an error skips the letter and reports the error.
	Transform func(*Letter) (json.RawMessage, error)
	// Limit bounds how many letters are replayed (0: all).
	Limit int
	// DryRun reports what would be replayed and changes nothing.
	DryRun bool
	// Progress, if set, is called after each letter.
	Progress func(ReplayProgress)
	// IngressTopics are the topics open to ingress now. A message ingress refused (a letter
	// of group "ingress") is replayed only to one of them, unless Force: ingress's allow
	// list is what let a client publish there at all, so a replay must not bypass it. Nil:
	// no such letter is replayed without Force.
	IngressTopics []string
	// Force replays ingress's refusals to any topic, bypassing IngressTopics.
	Force bool
}

// ReplayProgress reports a running replay or discard.
type ReplayProgress struct {
	Done, Total, Failed int
}

// ReplayReport is the outcome of Replay.
type ReplayReport struct {
	// Letters are the letters selected (in a dry run: the ones that would be replayed).
	Letters []*Letter
	// Replayed counts letters republished and removed.
	Replayed int
	// Events are the republished events, in order.
	Events []*jetbus.Event
	// Failed maps a letter's DLQ sequence to why it was not replayed; it stays in the DLQ.
	Failed map[uint64]error
}

// ReplayID returns the event ID a letter is republished with: replaying the same letter
// again (for example after a crash between the republish and the removal) is dropped as a
// duplicate within the topic's duplicate window.
func ReplayID(l *Letter) string {
	if l.Rejected() {
		return replayPrefix + "rejected:" + l.OriginalID
	}
	return replayPrefix + l.OriginalStream + ":" + strconv.FormatUint(l.OriginalSeq, 10) + ":" + l.Group
}

// replayPrefix starts every replayed event's ID: only such events are looked up in
// ReplayBucket.
const replayPrefix = "replay:"

// ingressGroup is the group of the messages ingress refused (Rejected.By).
const ingressGroup = "ingress"

func replayKey(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// recordReplay notes, before the republish, that the event with this ID is meant for group.
func (q *Queue) recordReplay(ctx context.Context, id, group string) error {
	if _, err := q.replayKV.Put(ctx, replayKey(id), []byte(group)); err != nil {
		return fmt.Errorf("dlq: record replay %s: %w", id, retry.Opaque(err))
	}
	return nil
}

// replayedFor returns the group a replayed event is meant for, or "" for any other event.
func (q *Queue) replayedFor(ctx context.Context, id string) (string, error) {
	if !strings.HasPrefix(id, replayPrefix) {
		return "", nil
	}
	e, err := q.replayKV.Get(ctx, replayKey(id))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return "", nil // an ID that looks like a replay but is none: an ordinary event
	}
	if err != nil {
		return "", fmt.Errorf("dlq: look up replay %s: %w", id, retry.Opaque(err))
	}
	return string(e.Value()), nil
}

// Replay republishes the dead letters matching opts.Filter, oldest first, through pub, and
// removes each once its republish is acknowledged. See the package doc for what a replayed
// event carries. A letter that fails to republish (e.g. a schema violation) stays and is
// reported in Failed; the replay goes on with the others, except that later letters of the
// same group and key are held back to keep their order.
func (q *Queue) Replay(ctx context.Context, pub Publisher, opts ReplayOptions) (*ReplayReport, error) {
	letters, err := q.List(ctx, opts.Filter, opts.Limit)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{Letters: letters, Failed: map[uint64]error{}}
	if opts.DryRun {
		return rep, nil
	}
	s, err := q.stream(ctx)
	if err != nil {
		return nil, err
	}
	blocked := map[string]bool{} // group+key of a letter that failed to replay
	touched := map[parkRef]bool{}
	for i, l := range letters {
		gk := l.Group + "\x00" + l.Key
		var ev *jetbus.Event
		switch {
		case l.Key != "" && blocked[gk]:
			err = fmt.Errorf("an earlier letter of key %q in group %s did not replay", l.Key, l.Group)
		case l.Rejected() && l.Group == ingressGroup && !opts.Force && !slices.Contains(opts.IngressTopics, l.Topic):
			err = fmt.Errorf("%w: ingress refused it and topic %q is not open to ingress (ingress.allow); --force replays it anyway, bypassing ingress's allow list", ErrNotReplayable, l.Topic)
		default:
			ev, err = q.replayOne(ctx, pub, s, l, opts.Transform)
		}
		if err != nil {
			rep.Failed[l.Seq] = err
			if l.Key != "" {
				blocked[gk] = true
			}
		} else {
			rep.Replayed++
			rep.Events = append(rep.Events, ev)
			q.metrics.replay(l.Topic)
			if l.Key != "" {
				touched[parkRef{l.Group, l.OriginalStream, l.Topic, l.Key}] = true
			}
		}
		if opts.Progress != nil {
			opts.Progress(ReplayProgress{Done: i + 1, Total: len(letters), Failed: len(rep.Failed)})
		}
	}
	if err := q.release(ctx, touched); err != nil {
		return rep, err
	}
	return rep, nil
}

func (q *Queue) replayOne(ctx context.Context, pub Publisher, s natsjs.Stream, l *Letter, transform func(*Letter) (json.RawMessage, error)) (*jetbus.Event, error) {
	body := l.Body
	if transform != nil {
		var err error
		if body, err = transform(l); err != nil {
			return nil, fmt.Errorf("transform: %w", err)
		}
	}
	opts := []jetbus.PublishOption{jetbus.WithDerivedID(ReplayID(l))}
	if l.OriginalID != "" {
		opts = append(opts, jetbus.WithCausedBy(l.OriginalID))
	}
	if l.Key != "" {
		opts = append(opts, jetbus.WithKey(l.Key))
	}
	if sid := l.Header.Get(jetbus.HeaderSID); sid != "" {
		opts = append(opts, jetbus.WithSID(sid))
	}
	if tags := l.Header.Get(jetbus.HeaderTags); tags != "" {
		opts = append(opts, jetbus.WithTags(strings.Split(tags, ",")...))
	}
	headers := map[string]string{}
	for k, v := range l.Header {
		if len(v) == 0 || !strings.HasPrefix(k, "x-") || jetbus.ValidateHeaderName(k) != nil ||
			k == jetbus.HeaderSchemaVersion {
			continue // reserved and mapped headers are not the event's; the publish path stamps the schema version again
		}
		headers[k] = v[0]
	}
	opts = append(opts, jetbus.WithHeaders(headers))
	if !l.Rejected() { // a rejected message never reached its topic: every group gets it
		if err := q.recordReplay(ctx, ReplayID(l), l.Group); err != nil {
			return nil, err
		}
	}
	ev, err := pub.Publish(ctx, l.Topic, body, opts...)
	if err != nil {
		return nil, fmt.Errorf("republish to %s: %w", l.Topic, err)
	}
	if err := s.DeleteMsg(ctx, l.Seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
		return ev, fmt.Errorf("remove dead letter %d after republishing it as %s: %w", l.Seq, ev.ID, err)
	}
	return ev, nil
}

// Discard removes the dead letters matching f (at most limit; 0: all) and returns how many.
func (q *Queue) Discard(ctx context.Context, f Filter, limit int) (int, error) {
	letters, err := q.List(ctx, f, limit)
	if err != nil {
		return 0, err
	}
	s, err := q.stream(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	touched := map[parkRef]bool{}
	for _, l := range letters {
		if err := s.DeleteMsg(ctx, l.Seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
			return n, fmt.Errorf("dlq: discard %d: %w", l.Seq, retry.Opaque(err))
		}
		n++
		q.metrics.discard(l.Topic)
		if l.Key != "" {
			touched[parkRef{l.Group, l.OriginalStream, l.Topic, l.Key}] = true
		}
	}
	return n, q.release(ctx, touched)
}

type parkRef struct{ group, stream, topic, key string }

// release unparks every touched key that has no dead letter left in its group.
func (q *Queue) release(ctx context.Context, touched map[parkRef]bool) error {
	if !q.cfg.Parking {
		return nil
	}
	for r := range touched {
		left, err := q.Count(ctx, Filter{Topic: r.topic, Group: r.group, Key: r.key})
		if err != nil {
			return err
		}
		if left == 0 {
			if err := q.unpark(ctx, r.group, r.stream, r.key); err != nil {
				return fmt.Errorf("dlq: release key %q: %w", r.key, retry.Opaque(err))
			}
		}
	}
	return nil
}
