package dlq_test

import (
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		cfg   dlq.Config
		field string // named in the error; "" when valid
	}{
		{"zero value", dlq.Config{}, ""},
		{"full", dlq.Config{Replicas: 3, MaxAge: time.Hour, DuplicateWindow: 2 * time.Hour, Parking: true}, ""},
		{"negative replicas", dlq.Config{Replicas: -1}, "Replicas"},
		{"too many replicas", dlq.Config{Replicas: 6}, "Replicas"},
		{"negative max age", dlq.Config{MaxAge: -time.Second}, "MaxAge"},
		{"negative duplicate window", dlq.Config{DuplicateWindow: -time.Second}, "DuplicateWindow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.cfg
			err := tc.cfg.Validate()
			assert.Equal(t, before, tc.cfg, "Validate does not change its receiver")
			if tc.field == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, dlq.ErrInvalidConfig)
			assert.ErrorIs(t, err, jetbus.ErrInvalidConfig, "the package's sentinel is the root's")
			assert.ErrorContains(t, err, tc.field)
		})
	}
	t.Run("Open refuses it", func(t *testing.T) {
		bus := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
		_, err := dlq.Open(t.Context(), bus.JetStream(), dlq.Config{Replicas: -1})
		assert.ErrorIs(t, err, dlq.ErrInvalidConfig)
	})
}

// TestAttachKeepsSettings: a Queue opened with Attach uses the DLQ as its owner configured
// it; one opened without it updates the DLQ to its Config; Attach creates what is missing.
func TestAttachKeepsSettings(t *testing.T) {
	bus := embeddedtest.Bus(t, embeddedtest.NATS(t).ClientURL())
	js := bus.JetStream()
	ctx := t.Context()
	maxAge := func(stream string) time.Duration {
		t.Helper()
		s, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		return s.CachedInfo().Config.MaxAge
	}
	open := func(cfg dlq.Config) {
		t.Helper()
		q, err := dlq.Open(ctx, js, cfg)
		require.NoError(t, err)
		require.NoError(t, q.Close())
	}

	open(dlq.Config{Attach: true, MaxAge: time.Hour, Parking: true})
	assert.Equal(t, time.Hour, maxAge(dlq.StreamName), "created when missing")
	assert.Equal(t, time.Hour, maxAge(dlq.AdvisoryStreamName))
	_, err := js.KeyValue(ctx, dlq.ParkBucket)
	require.NoError(t, err, "the parking bucket created when missing")

	open(dlq.Config{Attach: true})
	assert.Equal(t, time.Hour, maxAge(dlq.StreamName), "attached: left as it was")
	assert.Equal(t, time.Hour, maxAge(dlq.AdvisoryStreamName))

	open(dlq.Config{MaxAge: 2 * time.Hour})
	assert.Equal(t, 2*time.Hour, maxAge(dlq.StreamName), "the owner's settings applied")
	assert.Equal(t, 2*time.Hour, maxAge(dlq.AdvisoryStreamName))
}

// TestOpenUpdatesOnlyChanges: opening a Queue whose streams and buckets already have its
// configuration sends no update (every process start opens one, and an update racing another
// process's consumer creation is a data race in nats-server 2.15.2); a stream or bucket that
// lacks the configuration is updated, and only it.
func TestOpenUpdatesOnlyChanges(t *testing.T) {
	s := embeddedtest.NATS(t)
	bus := embeddedtest.Bus(t, s.ClientURL())
	js := bus.JetStream()
	ctx := t.Context()
	open := func(cfg dlq.Config) {
		t.Helper()
		q, err := dlq.Open(ctx, js, cfg)
		require.NoError(t, err)
		require.NoError(t, q.Close())
	}

	updated := embeddedtest.StreamUpdates(t, s.ClientURL(), bus.Conn())

	cfg := dlq.Config{Parking: true}
	open(cfg)
	for range 3 { // restarts, with the defaults filled in again
		open(cfg)
	}
	assert.Empty(t, updated(), "unchanged streams or buckets were updated")

	cfg.MaxAge = time.Hour
	open(cfg)
	assert.ElementsMatch(t, []string{dlq.StreamName, dlq.AdvisoryStreamName}, updated(), "the streams MaxAge sets")
	cfg.Rejects.MaxBytes = 1 << 20
	open(cfg)
	assert.Equal(t, []string{dlq.RejectsStreamName}, updated())

	// A bucket changed behind the Queue's back is set back, alone.
	_, err := js.UpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: dlq.ParkBucket, History: 1, Description: "changed"})
	require.NoError(t, err)
	require.Len(t, updated(), 1)
	open(cfg)
	assert.Equal(t, []string{"KV_" + dlq.ParkBucket}, updated())
	kv, err := js.KeyValue(ctx, dlq.ParkBucket)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, "changed", st.Config().Description)
	open(cfg)
	assert.Empty(t, updated())
}

// TestOpenConcurrentCreates: bridges that open the DLQ at once, each with another MaxAge, all
// open it: a create that meets "already in use" (another bridge's stream or bucket, created
// between the look and the create) looks again and updates.
func TestOpenConcurrentCreates(t *testing.T) {
	s := embeddedtest.NATS(t)
	const processes = 4
	start := make(chan struct{})
	errs := make([]error, processes)
	var wg sync.WaitGroup
	for i := range processes {
		js := embeddedtest.Bus(t, s.ClientURL()).JetStream()
		wg.Go(func() {
			<-start
			q, err := dlq.Open(t.Context(), js, dlq.Config{Parking: true, MaxAge: time.Duration(i+1) * time.Hour})
			if err == nil {
				err = q.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "bridge %d", i)
	}
}
