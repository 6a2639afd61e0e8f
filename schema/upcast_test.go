package schema_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/schema"
)

// A topic whose payload evolves three times:
// v1 {"mem_mb": n}
// v2 {"mem_mib": n}                      (rename)
// v3 {"mem_mib": n, "host": {"os": s}}   (default, nested)
// v4 same as v3, "debug" removed         (remove, plus copy of mem_mib to "legacy_mem")
const (
	hbV1 = `{"type":"object","properties":{"mem_mb":{"type":"integer"},"debug":{"type":"boolean"}},"required":["mem_mb"]}`
	hbV2 = `{"type":"object","properties":{"mem_mib":{"type":"integer"},"debug":{"type":"boolean"}},"required":["mem_mib"]}`
	hbV3 = `{"type":"object","properties":{"mem_mib":{"type":"integer"},"debug":{"type":"boolean"},"host":{"type":"object","properties":{"os":{"type":"string"}},"required":["os"]}},"required":["mem_mib","host"]}`
	hbV4 = `{"type":"object","properties":{"mem_mib":{"type":"integer"},"legacy_mem":{"type":"integer"},"host":{"type":"object","properties":{"os":{"type":"string"}},"required":["os"]}},"required":["mem_mib","host","legacy_mem"],"not":{"required":["debug"]}}`
)

var (
	opsV2 = []schema.Op{{Op: "rename", From: "/mem_mb", Path: "/mem_mib"}}
	opsV3 = []schema.Op{{Op: "default", Path: "/host/os", Value: json.RawMessage(`"linux"`)}}
	opsV4 = []schema.Op{{Op: "remove", Path: "/debug"}, {Op: "copy", From: "/mem_mib", Path: "/legacy_mem"}}
)

// goV2, goV3 and goV4 are the Go equivalents of the declarative upcasters.
func goV2(in json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil {
		return nil, err
	}
	if v, ok := m["mem_mb"]; ok {
		m["mem_mib"] = v
		delete(m, "mem_mb")
	}
	return json.Marshal(m)
}

func goV3(in json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil {
		return nil, err
	}
	host, _ := m["host"].(map[string]any)
	if host == nil {
		host = map[string]any{}
		m["host"] = host
	}
	if _, ok := host["os"]; !ok {
		host["os"] = "linux"
	}
	return json.Marshal(m)
}

func goV4(in json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil {
		return nil, err
	}
	delete(m, "debug")
	if v, ok := m["mem_mib"]; ok {
		m["legacy_mem"] = v
	}
	return json.Marshal(m)
}

func registerHeartbeat(t *testing.T, r *schema.Registry, declarative bool) {
	t.Helper()
	ctx := ctxT(t)
	topic := "heartbeat.received"
	require.NoError(t, r.SetMode(ctx, topic, schema.ModeNone, ""))
	with := func(ops []schema.Op) []schema.RegisterOption {
		if declarative {
			return []schema.RegisterOption{schema.WithUpcast(ops...)}
		}
		return nil
	}
	for i, doc := range []string{hbV1, hbV2, hbV3, hbV4} {
		var opts []schema.RegisterOption
		switch i {
		case 1:
			opts = with(opsV2)
		case 2:
			opts = with(opsV3)
		case 3:
			opts = with(opsV4)
		}
		v, err := r.Register(ctx, topic, []byte(doc), opts...)
		require.NoError(t, err)
		require.Equal(t, i+1, v.Version)
	}
	if !declarative {
		require.NoError(t, r.AddUpcaster(topic, 1, goV2))
		require.NoError(t, r.AddUpcaster(topic, 2, goV3))
		require.NoError(t, r.AddUpcaster(topic, 3, goV4))
	}
}

// handle runs d through the upcast middleware and returns what the handler saw.
func handle(t *testing.T, r *schema.Registry, d *jetbus.Delivery) (*jetbus.Delivery, error) {
	t.Helper()
	var seen *jetbus.Delivery
	h := jetbus.ChainHandler(func(_ context.Context, d *jetbus.Delivery) error {
		seen = d
		return nil
	}, r.UpcastMiddleware())
	return seen, h(ctxT(t), d)
}

func delivery(topic, payload string, headers map[string]string) *jetbus.Delivery {
	return &jetbus.Delivery{Event: &jetbus.Event{ID: "e1", Topic: topic, Payload: json.RawMessage(payload), Headers: headers}, Attempt: 1, MaxAttempts: 5}
}

func TestUpcastChain(t *testing.T) {
	for _, declarative := range []bool{false, true} {
		t.Run(fmt.Sprintf("declarative=%v", declarative), func(t *testing.T) {
			r, _ := newRegistry(t)
			registerHeartbeat(t, r, declarative)
			tests := []struct {
				name    string
				payload string
				headers map[string]string
				from    string
			}{
				{"from v1", `{"mem_mb":512,"debug":true}`, map[string]string{"x-schema-version": "1"}, "1"},
				{"without a version header: v1", `{"mem_mb":512,"debug":true}`, nil, "1"},
				{"from v2", `{"mem_mib":512}`, map[string]string{"x-schema-version": "2"}, "2"},
				{"from v3, host kept", `{"mem_mib":512,"host":{"os":"linux"},"debug":false}`, map[string]string{"x-schema-version": "3"}, "3"},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					in := delivery("heartbeat.received", tc.payload, tc.headers)
					seen, err := handle(t, r, in)
					require.NoError(t, err)
					require.NotNil(t, seen)
					assert.JSONEq(t, `{"mem_mib":512,"legacy_mem":512,"host":{"os":"linux"}}`, string(seen.Payload))
					assert.Equal(t, "4", seen.Header("x-schema-version"))
					assert.Equal(t, tc.from, seen.Header(schema.HeaderUpcastedFrom))
					assert.Equal(t, tc.payload, string(in.Payload), "the original delivery is not modified")
					assert.Empty(t, in.Header(schema.HeaderUpcastedFrom))
				})
			}
			t.Run("latest passes unchanged", func(t *testing.T) {
				in := delivery("heartbeat.received", `{"mem_mib":1,"legacy_mem":1,"host":{"os":"bsd"}}`, map[string]string{"x-schema-version": "4"})
				seen, err := handle(t, r, in)
				require.NoError(t, err)
				assert.Same(t, in, seen)
				assert.Empty(t, seen.Header(schema.HeaderUpcastedFrom))
			})
		})
	}
}

func TestUpcastGoAndDeclarativeAgree(t *testing.T) {
	inputs := []string{
		`{"mem_mb":1}`, `{"mem_mb":1,"debug":true,"host":{}}`, `{"mem_mb":{"nested":[1,2]},"host":{"os":"x","arch":"arm"}}`, `{"other":"é<>&"}`,
	}
	pairs := []struct {
		goFn schema.Upcaster
		ops  []schema.Op
	}{{goV2, opsV2}, {goV3, opsV3}, {goV4, opsV4}}
	for _, in := range inputs {
		for i, p := range pairs {
			decl, err := schema.Declarative(p.ops...)
			require.NoError(t, err)
			a, err := p.goFn(json.RawMessage(in))
			require.NoError(t, err)
			b, err := decl(json.RawMessage(in))
			require.NoError(t, err)
			assert.JSONEq(t, string(a), string(b), "hop %d on %s", i+2, in)
		}
	}
}

func TestUpcastGoTakesPrecedence(t *testing.T) {
	r, _ := newRegistry(t)
	registerHeartbeat(t, r, true)
	require.NoError(t, r.AddUpcaster("heartbeat.received", 3, func(in json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"mem_mib":7,"legacy_mem":7,"host":{"os":"go"}}`), nil
	}))
	out, v, err := r.Upcast(ctxT(t), "heartbeat.received", 1, json.RawMessage(`{"mem_mb":1}`))
	require.NoError(t, err)
	assert.Equal(t, 4, v)
	assert.JSONEq(t, `{"mem_mib":7,"legacy_mem":7,"host":{"os":"go"}}`, string(out))
}

func TestUpcastMissingHop(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	topic := "heartbeat.received"
	require.NoError(t, r.SetMode(ctx, topic, schema.ModeNone, ""))
	_, err := r.Register(ctx, topic, []byte(hbV1))
	require.NoError(t, err)
	_, err = r.Register(ctx, topic, []byte(hbV2), schema.WithUpcast(opsV2...))
	require.NoError(t, err)
	_, err = r.Register(ctx, topic, []byte(hbV3)) // no upcaster from v2
	require.NoError(t, err)

	seen, err := handle(t, r, delivery(topic, `{"mem_mb":1}`, map[string]string{"x-schema-version": "1"}))
	require.ErrorIs(t, err, schema.ErrMissingUpcaster)
	assert.True(t, jetbus.IsPermanent(err), "a missing hop can never succeed: dead-letter it")
	assert.Contains(t, err.Error(), "v2 to v3")
	assert.Nil(t, seen, "the handler is not called")

	// A Go upcaster fills the hop.
	require.NoError(t, r.AddUpcaster(topic, 2, goV3))
	seen, err = handle(t, r, delivery(topic, `{"mem_mb":1}`, map[string]string{"x-schema-version": "1"}))
	require.NoError(t, err)
	assert.JSONEq(t, `{"mem_mib":1,"host":{"os":"linux"}}`, string(seen.Payload))

	// An identity hop is declared with WithUpcast() and no operations.
	v4 := `{"type":"object","properties":{"mem_mib":{"type":"integer"},"host":{"type":"object"},"debug":{"type":"boolean"},"tag":{"type":"string"}},"required":["mem_mib"]}`
	_, err = r.Register(ctx, topic, []byte(v4), schema.WithUpcast())
	require.NoError(t, err)
	seen, err = handle(t, r, delivery(topic, `{"mem_mb":1}`, nil))
	require.NoError(t, err)
	assert.Equal(t, "4", seen.Header("x-schema-version"))
}

func TestUpcastFailures(t *testing.T) {
	r, _ := newRegistry(t)
	registerHeartbeat(t, r, true)
	topic := "heartbeat.received"

	t.Run("invalid after upcasting", func(t *testing.T) {
		_, err := handle(t, r, delivery(topic, `{"mem_mb":"lots"}`, map[string]string{"x-schema-version": "1"}))
		require.ErrorIs(t, err, schema.ErrInvalid)
		assert.True(t, jetbus.IsPermanent(err))
	})
	t.Run("bad version header", func(t *testing.T) {
		_, err := handle(t, r, delivery(topic, `{}`, map[string]string{"x-schema-version": "two"}))
		require.ErrorIs(t, err, schema.ErrUnknownVersion)
		assert.True(t, jetbus.IsPermanent(err))
	})
	t.Run("version newer than known is retried", func(t *testing.T) {
		_, err := handle(t, r, delivery(topic, `{}`, map[string]string{"x-schema-version": "9"}))
		require.ErrorIs(t, err, schema.ErrUnknownVersion)
		assert.False(t, jetbus.IsPermanent(err), "another process may just have registered v9")
	})
	t.Run("upcaster fails", func(t *testing.T) {
		_, err := handle(t, r, delivery(topic, `{"mem_mb":1,"host":"str"}`, map[string]string{"x-schema-version": "2"}))
		require.ErrorIs(t, err, schema.ErrUpcast)
		assert.True(t, jetbus.IsPermanent(err))
	})
	t.Run("tombstone passes", func(t *testing.T) {
		in := delivery(topic, `null`, map[string]string{"x-schema-version": "1"})
		seen, err := handle(t, r, in)
		require.NoError(t, err)
		assert.Same(t, in, seen)
	})
	t.Run("topic without schema passes", func(t *testing.T) {
		in := delivery("other.topic", `{"anything":1}`, nil)
		seen, err := handle(t, r, in)
		require.NoError(t, err)
		assert.Same(t, in, seen)
	})
	t.Run("handler error is returned as is", func(t *testing.T) {
		boom := fmt.Errorf("boom")
		h := r.UpcastMiddleware()(func(context.Context, *jetbus.Delivery) error { return boom })
		require.Equal(t, boom, h(ctxT(t), delivery(topic, `{"mem_mb":1}`, nil)))
	})
}

func TestDeclarativeOps(t *testing.T) {
	tests := []struct {
		name string
		ops  []schema.Op
		in   string
		want string
	}{
		{"rename", []schema.Op{{Op: "rename", From: "/a", Path: "/b"}}, `{"a":1}`, `{"b":1}`},
		{"rename absent is a no-op", []schema.Op{{Op: "rename", From: "/a", Path: "/b"}}, `{"c":1}`, `{"c":1}`},
		{"rename into a new nested object", []schema.Op{{Op: "rename", From: "/a", Path: "/x/y"}}, `{"a":1}`, `{"x":{"y":1}}`},
		{"rename out of nesting", []schema.Op{{Op: "rename", From: "/x/y", Path: "/y"}}, `{"x":{"y":1}}`, `{"x":{},"y":1}`},
		{"copy", []schema.Op{{Op: "copy", From: "/a", Path: "/b"}}, `{"a":{"k":[1]}}`, `{"a":{"k":[1]},"b":{"k":[1]}}`},
		{"remove", []schema.Op{{Op: "remove", Path: "/a/b"}}, `{"a":{"b":1,"c":2}}`, `{"a":{"c":2}}`},
		{"remove absent", []schema.Op{{Op: "remove", Path: "/a/b"}}, `{"z":1}`, `{"z":1}`},
		{"default sets", []schema.Op{{Op: "default", Path: "/n", Value: json.RawMessage(`0`)}}, `{}`, `{"n":0}`},
		{"default keeps", []schema.Op{{Op: "default", Path: "/n", Value: json.RawMessage(`0`)}}, `{"n":5}`, `{"n":5}`},
		{"escaped pointer", []schema.Op{{Op: "rename", From: "/a~1b", Path: "/c~0d"}}, `{"a/b":1}`, `{"c~d":1}`},
		{"array index", []schema.Op{{Op: "copy", From: "/l/1", Path: "/second"}}, `{"l":[1,2]}`, `{"l":[1,2],"second":2}`},
		{"big numbers are kept", []schema.Op{{Op: "rename", From: "/a", Path: "/b"}}, `{"a":12345678901234567890}`, `{"b":12345678901234567890}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, err := schema.Declarative(tc.ops...)
			require.NoError(t, err)
			out, err := up(json.RawMessage(tc.in))
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(out))
			if tc.name == "big numbers are kept" {
				assert.Contains(t, string(out), "12345678901234567890")
			}
		})
	}

	bad := []schema.Op{
		{Op: "explode", Path: "/a"},
		{Op: "rename", Path: "/a"},
		{Op: "rename", From: "a", Path: "/b"},
		{Op: "remove", Path: ""},
		{Op: "remove", Path: "/a~2"},
		{Op: "default", Path: "/a"},
		{Op: "default", Path: "/a", Value: json.RawMessage(`{`)},
		{Op: "copy", From: "/a", Path: "/a/b"},
	}
	for _, op := range bad {
		_, err := schema.Declarative(op)
		require.ErrorIs(t, err, schema.ErrInvalidUpcaster, "%+v", op)
	}
	up, err := schema.Declarative(schema.Op{Op: "default", Path: "/a/b", Value: json.RawMessage(`1`)})
	require.NoError(t, err)
	_, err = up(json.RawMessage(`{"a":"string"}`))
	require.ErrorIs(t, err, schema.ErrUpcast)
	_, err = up(json.RawMessage(`not json`))
	require.ErrorIs(t, err, schema.ErrUpcast)

	r, _ := newRegistry(t)
	require.ErrorIs(t, r.AddUpcaster("t", 0, goV2), schema.ErrInvalidUpcaster)
	require.ErrorIs(t, r.AddUpcaster("t", 1, nil), schema.ErrInvalidUpcaster)
	require.ErrorIs(t, r.AddUpcaster("T", 1, goV2), jetbus.ErrInvalidTopic)
}
