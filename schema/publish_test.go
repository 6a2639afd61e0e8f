package schema_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/schema"
)

// recorder is an innermost publish step that records what reaches it.
type recorder struct{ events []*jetbus.Event }

func (r *recorder) publish(_ context.Context, e *jetbus.Event) error {
	r.events = append(r.events, e)
	return nil
}

func TestPublishMiddleware(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	_, err := r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	_, err = r.Register(ctx, "orders.created", []byte(orderV2))
	require.NoError(t, err)
	rec := &recorder{}
	pub := jetbus.ChainPublish(rec.publish, r.PublishMiddleware())

	tests := []struct {
		name    string
		event   jetbus.Event
		wantErr error
		stamped string
	}{
		{"valid, stamped with the latest", jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1,"note":"n"}`)}, nil, "2"},
		{"invalid", jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":0}`)}, schema.ErrInvalid, ""},
		{"not JSON", jetbus.Event{Topic: "orders.created", Payload: []byte(`{`)}, schema.ErrInvalid, ""},
		{"explicit older version", jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`),
			Headers: map[string]string{"x-schema-version": "1"}}, nil, "1"},
		{"explicit older version, invalid under it", jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1,"note":"n"}`),
			Headers: map[string]string{"x-schema-version": "1"}}, schema.ErrInvalid, ""},
		{"explicit unknown version", jetbus.Event{Topic: "orders.created", Payload: []byte(`{}`),
			Headers: map[string]string{"x-schema-version": "7"}}, schema.ErrUnknownVersion, ""},
		{"tombstone", jetbus.Event{Topic: "orders.created", Payload: []byte(`null`)}, nil, "2"},
		{"versioned topic uses the base topic's version", jetbus.Event{Topic: "orders.created.v1", Payload: []byte(`{"id":"a","qty":1}`)}, nil, "1"},
		{"versioned topic, invalid", jetbus.Event{Topic: "orders.created.v1", Payload: []byte(`{"id":"a","qty":1,"note":"n"}`)}, schema.ErrInvalid, ""},
		{"topic without schema passes", jetbus.Event{Topic: "free.topic", Payload: []byte(`[1,2]`)}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec.events = nil
			e := tc.event
			err := pub(ctx, &e)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Empty(t, rec.events, "nothing is published")
				return
			}
			require.NoError(t, err)
			require.Len(t, rec.events, 1)
			assert.Equal(t, tc.stamped, rec.events[0].Header(jetbus.HeaderSchemaVersion))
		})
	}
	var ve *schema.ValidationError
	e := jetbus.Event{Topic: "orders.created", Payload: []byte(`{"qty":"x"}`)}
	require.ErrorAs(t, pub(ctx, &e), &ve)
	assert.Equal(t, "orders.created", ve.Topic)
	assert.Equal(t, 2, ve.Version)
}

func TestPublishMiddlewareStrict(t *testing.T) {
	r, _ := newRegistry(t, schema.WithStrict())
	ctx := ctxT(t)
	rec := &recorder{}
	pub := jetbus.ChainPublish(rec.publish, r.PublishMiddleware())
	err := pub(ctx, &jetbus.Event{Topic: "orders.created", Payload: []byte(`{}`)})
	require.ErrorIs(t, err, schema.ErrNoSchema)
	assert.Empty(t, rec.events)

	_, err = r.Register(ctx, "orders.created", []byte(orderV1))
	require.NoError(t, err)
	require.NoError(t, pub(ctx, &jetbus.Event{Topic: "orders.created", Payload: []byte(`{"id":"a","qty":1}`)}))
	require.ErrorIs(t, pub(ctx, &jetbus.Event{Topic: "orders.created.v2", Payload: []byte(`{}`)}), schema.ErrNoSchema,
		"a versioned topic needs that version of its base topic")
}
