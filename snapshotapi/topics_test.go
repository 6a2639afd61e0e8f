package snapshotapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/snapshotapi"
)

// topicsAPI serves the keyed topic users, the plain topic plain and the declared topic
// missing (which has no stream), read by a Bus over an embedded nats-server.
func topicsAPI(t *testing.T, opts ...apiOpt) (*api, *jbjs.Bus) {
	t.Helper()
	srv := embeddedtest.NATS(t)
	b := embeddedtest.Bus(t, srv.ClientURL())
	ctx := t.Context()
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "users", Partitions: 2, Keyed: true}))
	require.NoError(t, b.EnsureTopic(ctx, jbjs.TopicConfig{Name: "plain", Partitions: 2}))
	opts = append([]apiOpt{func(c *snapshotapi.Config, d *snapshotapi.Deps) {
		c.Topics = []string{"users", "plain", "missing"}
		d.Keys = b
	}}, opts...)
	return newAPI(t, false, opts...), b
}

// storedAt is the time the stream stored event seq of topic.
func storedAt(t *testing.T, b *jbjs.Bus, topic string, seq uint64) time.Time {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), jetbus.StreamName(topic))
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	return m.Time
}

func TestTopicKey(t *testing.T) {
	a, b := topicsAPI(t)
	ctx := t.Context()
	evTS := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v1, err := b.Publish(ctx, "users", map[string]any{"name": "Ada", "n": 1}, jetbus.WithKey("u/1 é"), jetbus.WithTS(evTS))
	require.NoError(t, err)
	v2, err := b.Publish(ctx, "users", map[string]any{"name": "Ada L.", "n": 2}, jetbus.WithKey("u/1 é"), jetbus.WithTS(evTS.Add(time.Minute)))
	require.NoError(t, err)
	_, err = b.Publish(ctx, "users", map[string]any{"n": 1}, jetbus.WithKey("gone"))
	require.NoError(t, err)
	gone, err := b.Publish(ctx, "users", nil, jetbus.WithKey("gone"))
	require.NoError(t, err)
	t1, t2 := storedAt(t, b, "users", v1.Seq), storedAt(t, b, "users", v2.Seq)
	require.True(t, t2.After(t1))
	key := "/v1/topics/users/keys/" + url.PathEscape("u/1 é")
	at := func(tm time.Time) string { return key + "?at=" + url.QueryEscape(tm.Format(time.RFC3339Nano)) }

	cases := []struct {
		name   string
		path   string
		status int
		code   string // error code
		n      float64
		seq    uint64
	}{
		{"latest", key, 200, "", 2, v2.Seq},
		{"at the first event's store time exactly", at(t1), 200, "", 1, v1.Seq},
		{"a nanosecond before the second", at(t2.Add(-time.Nanosecond)), 200, "", 1, v1.Seq},
		{"at the second event's store time exactly", at(t2), 200, "", 2, v2.Seq},
		{"later", at(t2.Add(time.Hour)), 200, "", 2, v2.Seq},
		{"a nanosecond before the first", at(t1.Add(-time.Nanosecond)), 404, snapshotapi.CodeNotFound, 0, 0},
		{"Unix milliseconds after both", key + "?at=" + strconv.FormatInt(t2.UnixMilli()+1, 10), 200, "", 2, v2.Seq},
		{"a key without events", "/v1/topics/users/keys/nobody", 404, snapshotapi.CodeNotFound, 0, 0},
		{"a deleted key (tombstone)", "/v1/topics/users/keys/gone", 404, snapshotapi.CodeNotFound, 0, 0},
		{"a plain topic", "/v1/topics/plain/keys/u1", 422, snapshotapi.CodeNotKeyed, 0, 0},
		{"a declared topic without a stream", "/v1/topics/missing/keys/u1", 404, snapshotapi.CodeUnknownTopic, 0, 0},
		{"an undeclared topic", "/v1/topics/secrets/keys/u1", 404, snapshotapi.CodeUnknownTopic, 0, 0},
		{"a bad time", key + "?at=yesterday", 400, snapshotapi.CodeBadQuery, 0, 0},
		{"at twice", key + "?at=1&at=2", 400, snapshotapi.CodeBadQuery, 0, 0},
		{"an unknown parameter", key + "?meta=1", 400, snapshotapi.CodeBadQuery, 0, 0},
		{"an operator as a parameter", key + "?%24where=1", 400, snapshotapi.CodeBadQuery, 0, 0},
		{"a key with a control character", "/v1/topics/users/keys/a%0Ab", 400, snapshotapi.CodeBadKey, 0, 0},
		{"a key over 1024 bytes", "/v1/topics/users/keys/" + fmt.Sprintf("%01100d", 7), 400, snapshotapi.CodeBadKey, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a.t = t
			r := a.get(c.path)
			require.Equal(t, c.status, r.StatusCode, "%s", r.body)
			if c.code != "" {
				assert.Equal(t, c.code, r.errorCode(t))
				assert.Empty(t, r.Header.Get("ETag"))
				return
			}
			m := r.json(t)
			assert.Equal(t, "users", m["topic"])
			assert.Equal(t, "u/1 é", m["key"])
			assert.Equal(t, float64(c.seq), m["seq"])
			assert.Equal(t, c.n, m["payload"].(map[string]any)["n"])
			assert.Equal(t, fmt.Sprintf(`"%d-t1"`, c.seq), r.Header.Get("ETag"))
			assert.NotEmpty(t, r.Header.Get("Last-Modified"))
		})
	}
	a.t = t
	assert.Equal(t, float64(gone.Seq), a.get("/v1/topics/users/keys/gone").json(t)["error"].(map[string]any)["details"].(map[string]any)["seq"])

	t.Run("conditional", func(t *testing.T) {
		a.t = t
		etag := a.get(key).Header.Get("ETag")
		r := a.get(key, "If-None-Match", etag)
		assert.Equal(t, http.StatusNotModified, r.StatusCode)
		assert.Equal(t, etag, r.Header.Get("ETag"))
		assert.Equal(t, http.StatusOK, a.get(at(t1), "If-None-Match", etag).StatusCode, "another version")
		assert.Equal(t, http.StatusPreconditionFailed, a.get(key, "If-Match", `"1-t1"`).StatusCode)
		h := a.do(http.MethodHead, key)
		assert.Equal(t, http.StatusOK, h.StatusCode)
		assert.Equal(t, etag, h.Header.Get("ETag"))
	})
}

// A message of a foreign client whose body is not JSON is a 422, not a 500.
func TestTopicKeyForeignBody(t *testing.T) {
	a, b := topicsAPI(t)
	p := jetbus.PartitionOf("f", 2)
	msg := nats.NewMsg(jetbus.KeyedSubject("users", p, "f"))
	msg.Header.Set(jetbus.HeaderKey, "f")
	msg.Data = []byte("not json")
	_, err := b.JetStream().PublishMsg(t.Context(), msg)
	require.NoError(t, err)
	r := a.get("/v1/topics/users/keys/f")
	require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, "%s", r.body)
	assert.Equal(t, snapshotapi.CodeNotJSON, r.errorCode(t))
}

func TestTopicKeyScope(t *testing.T) {
	a, b := topicsAPI(t, withConfig(func(c *snapshotapi.Config) {
		c.Tokens = []snapshotapi.Token{
			{Name: "users", Token: "users-token", Views: []string{snapshotapi.TopicScope("users")}},
			{Name: "views", Token: "views-token", Views: []string{"orders"}},
			{Name: "all", Token: "all-token", Views: []string{"*"}},
		}
	}))
	_, err := b.Publish(t.Context(), "users", map[string]int{"n": 1}, jetbus.WithKey("u1"))
	require.NoError(t, err)
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"topic scope", "users-token", 200},
		{"every view and topic", "all-token", 200},
		{"views only", "views-token", 403},
		{"no token", "", 401},
		{"unknown token", "nope", 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			a.t = t
			var hdr []string
			if c.token != "" {
				hdr = []string{"Authorization", "Bearer " + c.token}
			}
			r := a.get("/v1/topics/users/keys/u1", hdr...)
			assert.Equal(t, c.status, r.StatusCode, "%s", r.body)
		})
	}
}

func TestTopicsConfig(t *testing.T) {
	db := embeddedtest.Mongo(t)
	base := snapshotapi.Config{CursorKey: testKey, Views: []snapshotapi.View{ordersView(db.Name())}}
	for _, c := range []struct {
		name string
		cfg  func(c *snapshotapi.Config)
	}{
		{"a bad topic name", func(c *snapshotapi.Config) { c.Topics = []string{"Users"} }},
		{"a topic twice", func(c *snapshotapi.Config) { c.Topics = []string{"users", "users"} }},
		{"a token scoped to an undeclared topic", func(c *snapshotapi.Config) {
			c.Topics = []string{"users"}
			c.Tokens = []snapshotapi.Token{{Token: "x", Views: []string{"topic:other"}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.cfg(&cfg)
			assert.ErrorIs(t, cfg.Validate(), snapshotapi.ErrInvalidConfig)
		})
	}
	cfg := base
	cfg.Topics = []string{"users"}
	_, err := snapshotapi.New(snapshotapi.Deps{Mongo: db.Client()}, cfg)
	assert.ErrorIs(t, err, snapshotapi.ErrInvalidConfig, "Topics without Deps.Keys")
}
