package changefeed

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// item is what a runner's reader makes of one read: the entry to push into the window and,
// when the entry stands for a publish, the message to publish first. An item without a
// message needs no publish: a heartbeat, a change without a document, an outbox document
// already dead-lettered.
type item struct {
	e *entry
	m *message
}

// errSourceDone is returned by a reader whose source has no more to read: a cursor at its
// end. pump returns nil for it.
var errSourceDone = errors.New("changefeed: source done")

// pump is the read→send→push loop of every runner phase: a feed's stream and copy, a
// drainer's scan of its outbox and tail of its change stream. It calls next for the next
// item, publishes the item's message through s (one at a time, each acknowledged before the
// next, while rec is active), and pushes the item's entry into w, in order. next returns a
// nil item for a read that gives nothing to push (a quiet stream, a skipped document); an
// item returned together with an error is pushed first, then the loop stops with the error.
//
// It returns nil when next reports errSourceDone or ctx ends, and errWindowFailed when a
// publish of the window failed (push's error, passed on): the caller, which learns the
// failure itself from the window's close, can never take a stop for a failed publish for the
// end of its source and move on (a drainer from its scan to its tail, a copy to its next
// collection). Any other error of next or of a send is returned as it is.
func pump(ctx context.Context, w *window, s *sender, rec *recovery, next func(context.Context) (*item, error)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.failed():
			return errWindowFailed
		default:
		}
		it, err := next(ctx)
		if it != nil {
			if perr := sendPush(ctx, w, s, rec, it); perr != nil {
				return perr
			}
		}
		if err != nil {
			if errors.Is(err, errSourceDone) || ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// sendPush publishes it.m, if any, and pushes it.e into w.
func sendPush(ctx context.Context, w *window, s *sender, rec *recovery, it *item) error {
	if it.m != nil {
		var err error
		if rec.active() {
			it.e.step.dup, it.e.step.rejected, err = rec.send(ctx, s, it.m)
		} else {
			it.e.fut, it.e.step.rejected, err = s.send(ctx, it.m)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if err := w.push(ctx, it.e); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return nil
}

// nextChange reads the next event of cs into cs.Current. It returns false with a nil error
// when the stream is quiet (nothing within its max await time); what names the stream in the
// error of a stream MongoDB closed.
func nextChange(ctx context.Context, cs *mongo.ChangeStream, what string) (bool, error) {
	if cs.TryNext(ctx) {
		return true, nil
	}
	if err := cs.Err(); err != nil {
		return false, err
	}
	if cs.ID() == 0 {
		return false, fmt.Errorf("changefeed: MongoDB closed the %s", what)
	}
	return false, nil
}

// nextDocument reads the next document of cur into cur.Current; errSourceDone at its end.
func nextDocument(ctx context.Context, cur *mongo.Cursor) error {
	if cur.Next(ctx) {
		return nil
	}
	if err := cur.Err(); err != nil {
		return err
	}
	return errSourceDone
}
