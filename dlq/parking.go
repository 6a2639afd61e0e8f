package dlq

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/internal/retry"
)

// parkSet mirrors the parked keys of one (group, stream) from the KV bucket.
type parkSet struct {
	ready chan struct{} // closed once the watcher delivered the initial values
	err   error         // set before ready is closed when the watch failed
	mu    sync.RWMutex
	keys  map[string]bool // KV keys
}

func parkPrefix(group, stream string) string { return group + "." + stream + "." }

func parkKey(group, stream, key string) string {
	return parkPrefix(group, stream) + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// set returns the parkSet of (group, stream), starting its watcher on first use.
func (q *Queue) set(ctx context.Context, group, stream string) (*parkSet, error) {
	id := group + "." + stream
	q.mu.Lock()
	ps := q.parked[id]
	if ps == nil {
		if q.closed {
			q.mu.Unlock()
			return nil, errors.New("dlq: queue closed")
		}
		ps = &parkSet{ready: make(chan struct{}), keys: make(map[string]bool)}
		q.parked[id] = ps
		q.wg.Add(1)
		go q.watch(ps, parkPrefix(group, stream)+">")
	}
	q.mu.Unlock()
	select {
	case <-ps.ready:
		return ps, ps.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// watch keeps ps in step with the bucket until the Queue closes.
func (q *Queue) watch(ps *parkSet, pattern string) {
	defer q.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-q.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	w, err := q.parkKV.Watch(ctx, pattern)
	if err != nil {
		ps.err = fmt.Errorf("dlq: watch parked keys: %w", retry.Opaque(err))
		close(ps.ready)
		q.mu.Lock()
		for id, s := range q.parked {
			if s == ps {
				delete(q.parked, id) // let the next caller try again
			}
		}
		q.mu.Unlock()
		return
	}
	defer w.Stop()
	initial := true
	for {
		select {
		case <-ctx.Done():
			if initial {
				ps.err = ctx.Err()
				close(ps.ready)
			}
			return
		case e, ok := <-w.Updates():
			if !ok {
				if initial {
					ps.err = errors.New("dlq: parked-key watch closed")
					close(ps.ready)
				}
				return
			}
			if e == nil {
				if initial {
					initial = false
					close(ps.ready)
				}
				continue
			}
			ps.mu.Lock()
			had := ps.keys[e.Key()]
			if e.Operation() == natsjs.KeyValuePut {
				ps.keys[e.Key()] = true
				if !had {
					q.metrics.parked(1)
				}
			} else if had {
				delete(ps.keys, e.Key())
				q.metrics.parked(-1)
			}
			ps.mu.Unlock()
		}
	}
}

func (q *Queue) isParked(ctx context.Context, group, stream, key string) (bool, error) {
	ps, err := q.set(ctx, group, stream)
	if err != nil {
		return false, err
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.keys[parkKey(group, stream, key)], nil
}

// park marks key as parked in group, in the bucket and at once in this process's view.
func (q *Queue) park(ctx context.Context, group, stream, key string) error {
	k := parkKey(group, stream, key)
	if _, err := q.parkKV.Put(ctx, k, []byte(key)); err != nil {
		return err
	}
	ps, err := q.set(ctx, group, stream)
	if err != nil {
		return err
	}
	ps.mu.Lock()
	if !ps.keys[k] {
		ps.keys[k] = true
		q.metrics.parked(1)
	}
	ps.mu.Unlock()
	return nil
}

func (q *Queue) unpark(ctx context.Context, group, stream, key string) error {
	k := parkKey(group, stream, key)
	if err := q.parkKV.Delete(ctx, k); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return err
	}
	q.mu.Lock()
	ps := q.parked[group+"."+stream]
	q.mu.Unlock()
	if ps != nil {
		ps.mu.Lock()
		if ps.keys[k] {
			delete(ps.keys, k)
			q.metrics.parked(-1)
		}
		ps.mu.Unlock()
	}
	return nil
}

// ParkedKeys lists the keys parked in group for topic's stream.
func (q *Queue) ParkedKeys(ctx context.Context, group, stream string) ([]string, error) {
	if q.parkKV == nil {
		return nil, nil
	}
	ps, err := q.set(ctx, group, stream)
	if err != nil {
		return nil, err
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	prefix := parkPrefix(group, stream)
	var out []string
	for k := range ps.keys {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(k, prefix))
		if err == nil {
			out = append(out, string(raw))
		}
	}
	return out, nil
}
