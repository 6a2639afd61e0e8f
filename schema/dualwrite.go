package schema

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/jetbus/jetbus"
)

// DualWriteMiddleware returns a publish middleware that, after an event of a topic with a
// schema is written, writes a copy to "<topic>.v<N>", N being the event's x-schema-version
// (or, without one, the latest version). Put it inside PublishMiddleware, so the version is
// stamped and the payload validated once. With topics, only those topics are dual-written;
// without, every topic with a schema. A topic that already ends in ".v<N>" is not copied.
//
// The copy keeps the event's ID, key and headers: its topic's stream drops a duplicate of a
// retried publish as the primary's does, and readers can correlate the two. The versioned
// topic must exist (EnsureTopic); if writing the copy fails, the error is returned after the
// primary write succeeded, and retrying the publish with the same ID is harmless.
func (r *Registry) DualWriteMiddleware(topics ...string) jetbus.PublishMiddleware {
	only := slices.Clone(topics)
	return func(next jetbus.PublishFunc) jetbus.PublishFunc {
		return func(ctx context.Context, e *jetbus.Event) error {
			if err := next(ctx, e); err != nil {
				return err
			}
			if versionedTopic.MatchString(e.Topic) || (len(only) > 0 && !slices.Contains(only, e.Topic)) {
				return nil
			}
			n := 0
			if h := e.Header(jetbus.HeaderSchemaVersion); h != "" {
				n, _ = strconv.Atoi(h)
			}
			if n < 1 {
				en, err := r.entryFor(e.Topic, 0)
				if err != nil {
					return nil // no schema: nothing to dual-write
				}
				n = en.v.Version
			}
			cp := *e
			cp.Topic = e.Topic + ".v" + strconv.Itoa(n)
			cp.Headers = maps.Clone(e.Headers)
			cp.SetHeader(jetbus.HeaderSchemaVersion, strconv.Itoa(n))
			cp.Partition, cp.Seq = 0, 0
			if err := next(ctx, &cp); err != nil {
				return fmt.Errorf("schema: dual-write of %s to %s: %w", e.ID, cp.Topic, err)
			}
			return nil
		}
	}
}
