package partition

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDrainingWhileStopping: a partition handed to another member asks whether its subscriber
// is draining while Drain may be starting on another goroutine; under go test -race an
// unordered read of the drain's context fails this test (seen in a projection rebuild, whose
// members change while the old generation drains).
func TestDrainingWhileStopping(t *testing.T) {
	s := &Subscriber{stopCh: make(chan struct{})}
	assert.Nil(t, s.draining(), "not stopping")
	ctx := t.Context()
	seen := make(chan context.Context, 1)
	go func() { seen <- s.draining() }()
	s.stop(ctx)
	if got := <-seen; got != nil {
		assert.Equal(t, ctx, got)
	}
	assert.Equal(t, ctx, s.draining(), "draining")
	s.stop(nil)
	assert.Equal(t, ctx, s.draining(), "a later Stop does not change a Drain under way")
}
