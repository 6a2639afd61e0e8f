package schema

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jetbus/jetbus"
)

var versionedTopic = regexp.MustCompile(`^(.+)\.v([0-9]+)$`)

// publishEntry finds the schema version an event is published with: the version its
// x-schema-version header names (which must be live), else the latest. A topic "<t>.v<N>"
// without schemas of its own uses version N of <t>. nil means the topic has no schema.
func (r *Registry) publishEntry(e *jetbus.Event) (*entry, error) {
	topic := e.Topic
	want := 0
	if h := e.Header(jetbus.HeaderSchemaVersion); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %s: bad %s header %q", ErrUnknownVersion, topic, jetbus.HeaderSchemaVersion, h)
		}
		want = n
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.topics[topic]
	if t == nil || t.latest() == nil {
		m := versionedTopic.FindStringSubmatch(topic)
		if m == nil {
			return nil, nil
		}
		n, _ := strconv.Atoi(m[2])
		base := r.topics[m[1]]
		if base == nil || base.versions[n] == nil || base.versions[n].v.Deleted || (want != 0 && want != n) {
			return nil, nil
		}
		return base.versions[n], nil
	}
	if want == 0 {
		return t.latest(), nil
	}
	en := t.versions[want]
	if en == nil || en.v.Deleted {
		return nil, fmt.Errorf("%w: %s v%d is not a live version", ErrUnknownVersion, topic, want)
	}
	return en, nil
}

// PublishMiddleware returns a publish middleware that validates every event of a topic with
// a schema against the latest version and stamps x-schema-version with it. An event that
// already carries x-schema-version (a replay of an older event) is validated against that
// version, which must be live (else ErrUnknownVersion). A topic "<t>.v<N>" without schemas of
// its own is validated against version N of <t>. A topic without a schema passes unvalidated,
// unless the registry is strict: then Publish fails with ErrNoSchema. A payload that does not
// validate fails with a *ValidationError (ErrInvalid) and nothing is published. Tombstones
// are stamped, not validated.
func (r *Registry) PublishMiddleware() jetbus.PublishMiddleware {
	return func(next jetbus.PublishFunc) jetbus.PublishFunc {
		return func(ctx context.Context, e *jetbus.Event) error {
			if r.isClosed() {
				return errRegistryClosed
			}
			en, err := r.publishEntry(e)
			if err != nil {
				return err
			}
			if en == nil {
				if r.opt.strict {
					return fmt.Errorf("%w: %s (the registry is strict)", ErrNoSchema, e.Topic)
				}
				return next(ctx, e)
			}
			if !e.Tombstone() {
				val, err := en.validator()
				if err != nil {
					return err
				}
				if err := val.Validate(e.Payload); err != nil {
					return err
				}
			}
			e.SetHeader(jetbus.HeaderSchemaVersion, strconv.Itoa(en.v.Version))
			return next(ctx, e)
		}
	}
}
