package dlq_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/dlq"
)

// TestHoldBackIsPerGroupTopicAndKey: a failed letter holds back the later letters of its
// group, topic and key, and nothing else: a letter of the same group and key in another topic
// is replayed. Whether the letters share a chunk (replayed at once, in lanes) or not, the
// outcome is the same.
func TestHoldBackIsPerGroupTopicAndKey(t *testing.T) {
	for _, chunk := range []int{1, dlq.ReplayChunk} {
		t.Run("chunk of "+strconv.Itoa(chunk), func(t *testing.T) {
			defer dlq.SetReplayChunk(chunk)()
			e := newEnv(t, dlq.Config{})
			e.topic("a", 1)
			e.topic("b", 1)
			// Group g, key k0: a#1, then b#1, then a#2.
			e.storeLetters("a", 0, 1, 1)
			e.storeLetters("b", 0, 1, 1)
			e.storeLetters("a", 1, 1, 1)
			rep, err := e.q.Replay(t.Context(), e.bus, dlq.ReplayOptions{
				Transform: func(l *dlq.Letter) (json.RawMessage, error) {
					if l.Topic == "a" && l.OriginalSeq == 1 {
						return nil, errors.New("still broken")
					}
					return l.Body, nil
				},
			})
			require.NoError(t, err)
			assert.Equal(t, 1, rep.Replayed, "b's letter")
			assert.Equal(t, 2, rep.FailedCount)
			left, err := e.q.List(t.Context(), dlq.Filter{}, 0)
			require.NoError(t, err)
			require.Len(t, left, 2)
			for _, l := range left {
				assert.Equal(t, "a", l.Topic)
			}
			assert.ErrorContains(t, rep.Failed[left[1].Position()], "an earlier letter of key")
		})
	}
}

// TestTooManyFailedKeysStopsTheReplay: a replay remembers at most MaxBlockedKeys failed keys
// (so as to hold back their later letters); the failure of one more stops it with
// ErrTooManyFailures, every letter kept, no letter started after it. Once the cause is fixed, a
// replay replays them all.
func TestTooManyFailedKeysStopsTheReplay(t *testing.T) {
	defer dlq.SetReplayChunk(1)() // one letter at a time: the stop is after the fourth
	defer dlq.SetMaxBlockedKeys(3)()
	e := newEnv(t, dlq.Config{})
	e.topic("a", 1)
	e.storeLetters("a", 0, 10, 10) // keys k0…k9
	rep, err := e.q.Replay(t.Context(), e.bus, dlq.ReplayOptions{
		Transform: func(*dlq.Letter) (json.RawMessage, error) { return nil, errors.New("still broken") },
	})
	require.ErrorIs(t, err, dlq.ErrTooManyFailures)
	assert.ErrorContains(t, err, "more than 3 keys")
	assert.Zero(t, rep.Replayed)
	assert.Equal(t, 4, rep.FailedCount, "three keys remembered, the fourth stops it")
	left, err := e.q.List(t.Context(), dlq.Filter{}, 0)
	require.NoError(t, err)
	require.Len(t, left, 10, "no letter lost")
	assert.Equal(t, left[0].Position(), rep.Resume, "go on from the first failure")
	assert.Equal(t, left[3].Position(), rep.Last, "no letter started after the fourth")

	rep, err = e.q.Replay(t.Context(), e.bus, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 10, rep.Replayed)
}
