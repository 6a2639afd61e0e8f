package streamscan_test

import (
	"bytes"
	"fmt"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/streamscan"
)

// TestScanBoundsFetchesByBytes: a scan reads every message in order with fetches bounded by
// bytes; a message larger than the bound is fetched alone, so large and small messages mix.
func TestScanBoundsFetchesByBytes(t *testing.T) {
	defer streamscan.SetBatchBytes(64 << 10)()
	s := embeddedtest.NATS(t)
	js, err := natsjs.New(embeddedtest.Connect(t, s.ClientURL()))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	const n = 60
	for i := range n {
		size := 100
		if i%3 == 0 {
			size = 100 << 10 // larger than one fetch may hold
		}
		_, err := js.Publish(ctx, "s.x", append([]byte(fmt.Sprintf("%03d", i)), bytes.Repeat([]byte("x"), size)...))
		require.NoError(t, err)
	}
	var got []string
	err = streamscan.Scan(ctx, js, "S", natsjs.OrderedConsumerConfig{}, func(m natsjs.Msg, _ *natsjs.MsgMetadata) bool {
		got = append(got, string(m.Data()[:3]))
		return true
	})
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, g := range got {
		assert.Equal(t, fmt.Sprintf("%03d", i), g)
	}
}
