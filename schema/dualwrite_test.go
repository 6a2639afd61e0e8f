package schema_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
)

func TestDualWriteMiddleware(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	_, err = r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)

	rec := &recorder{}
	pub := jetbus.ChainPublish(rec.publish, r.PublishMiddleware(), r.DualWriteMiddleware())
	e := &jetbus.Event{ID: "id1", Topic: "orders.created", Key: "k", Payload: []byte(`{"id":"a","qty":1}`),
		Headers: map[string]string{"x-trace": "t"}}
	require.NoError(t, pub(ctx, e))
	require.Len(t, rec.events, 2)
	assert.Same(t, e, rec.events[0], "the primary is the caller's event")
	cp := rec.events[1]
	assert.Equal(t, "orders.created.v2", cp.Topic)
	assert.Equal(t, "id1", cp.ID)
	assert.Equal(t, "k", cp.Key)
	assert.Equal(t, "2", cp.Header(jetbus.HeaderSchemaVersion))
	assert.Equal(t, "t", cp.Header("x-trace"))
	assert.Equal(t, string(e.Payload), string(cp.Payload))

	// An explicit older version goes to its own versioned topic.
	rec.events = nil
	require.NoError(t, pub(ctx, &jetbus.Event{ID: "id2", Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`),
		Headers: map[string]string{"x-schema-version": "1"}}))
	require.Len(t, rec.events, 2)
	assert.Equal(t, "orders.created.v1", rec.events[1].Topic)

	// Topics without schema, and versioned topics, are written once.
	rec.events = nil
	require.NoError(t, pub(ctx, &jetbus.Event{ID: "id3", Topic: "free.topic", Payload: []byte(`1`)}))
	require.NoError(t, pub(ctx, &jetbus.Event{ID: "id4", Topic: "orders.created.v1", Payload: []byte(`{"id":"a","qty":1}`)}))
	assert.Len(t, rec.events, 2)

	// Restricted to some topics.
	rec.events = nil
	only := jetbus.ChainPublish(rec.publish, r.PublishMiddleware(), r.DualWriteMiddleware("other.topic"))
	require.NoError(t, only(ctx, &jetbus.Event{ID: "id5", Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`)}))
	assert.Len(t, rec.events, 1)

	// A failing copy is reported; a failing primary stops before the copy.
	boom := errors.New("boom")
	calls := 0
	failSecond := jetbus.ChainPublish(func(_ context.Context, e *jetbus.Event) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	}, r.PublishMiddleware(), r.DualWriteMiddleware())
	err = failSecond(ctx, &jetbus.Event{ID: "id6", Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`)})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "orders.created.v2")
	calls = 1
	err = jetbus.ChainPublish(func(context.Context, *jetbus.Event) error { calls++; return boom }, r.DualWriteMiddleware())(ctx,
		&jetbus.Event{ID: "id7", Topic: "orders.created", Payload: []byte(`{}`)})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 2, calls, "no copy after a failed primary")
}
