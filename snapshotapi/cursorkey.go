package snapshotapi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus/internal/retry"
)

// The cursor key lives in NATS KV so that every replica of the API, started anywhere, signs
// and checks cursors with the same key without anyone configuring one: the first replica
// creates it (a KV create, so two first replicas cannot both win) and every other reads it.

// CursorKeyBucket is the KV bucket of the cursor key; CursorKeyName its key.
const (
	CursorKeyBucket = "jetbus_snapshotapi"
	CursorKeyName   = "cursor-key"
)

// KeyValueStore is what LoadCursorKey needs of a JetStream context: natsjs.JetStream has it.
type KeyValueStore interface {
	KeyValue(ctx context.Context, bucket string) (natsjs.KeyValue, error)
	CreateKeyValue(ctx context.Context, cfg natsjs.KeyValueConfig) (natsjs.KeyValue, error)
}

var _ KeyValueStore = natsjs.JetStream(nil)

// LoadCursorKey returns the cursor key shared by every replica (for Config.CursorKey),
// creating the bucket (with replicas) and the key the first time. A failure that may pass
// wraps jetbus.ErrUnavailable.
func LoadCursorKey(ctx context.Context, js KeyValueStore, replicas int) ([]byte, error) {
	kv, err := js.KeyValue(ctx, CursorKeyBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: CursorKeyBucket, History: 1, Replicas: max(replicas, 1),
			Description: "jetbus snapshot API: the key that signs list cursors"})
		if errors.Is(err, natsjs.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, CursorKeyBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshotapi: cursor key bucket: %w", retry.Opaque(err))
	}
	for range 2 {
		e, err := kv.Get(ctx, CursorKeyName)
		if err == nil {
			if len(e.Value()) < MinCursorKeyBytes {
				return nil, fmt.Errorf("snapshotapi: the cursor key in %s/%s is %d bytes, fewer than %d: delete it to make a new one",
					CursorKeyBucket, CursorKeyName, len(e.Value()), MinCursorKeyBytes)
			}
			return e.Value(), nil
		}
		if !errors.Is(err, natsjs.ErrKeyNotFound) {
			return nil, fmt.Errorf("snapshotapi: cursor key: %w", retry.Opaque(err))
		}
		key := make([]byte, MinCursorKeyBytes)
		_, _ = rand.Read(key)
		if _, err := kv.Create(ctx, CursorKeyName, key); err == nil {
			return key, nil
		} else if !errors.Is(err, natsjs.ErrKeyExists) {
			return nil, fmt.Errorf("snapshotapi: cursor key: %w", retry.Opaque(err))
		}
		// Another replica created it first: read that one.
	}
	return nil, errors.New("snapshotapi: cursor key: created and gone again")
}
