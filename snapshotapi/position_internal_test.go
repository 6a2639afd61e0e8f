package snapshotapi

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestPositionCodec: a position opens only with the key that sealed it, as it was written;
// anything else is a 400 bad_position naming the parameter.
func TestPositionCodec(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	c := newPositionCodec(key)
	cases := []streamPos{
		allAt("shop", "orders", bson.Timestamp{T: 1700000000, I: 7}),
		{db: "shop", coll: "orders-g2", ts: bson.Timestamp{T: 1, I: 0}, n: 3},
		{db: "d", coll: "c", ts: bson.Timestamp{T: 9, I: 1}, snapshot: true, binding: [16]byte{1, 2, 3}, after: "customer/42 é"},
		{db: "d", coll: "c-g2", ts: bson.Timestamp{T: 9, I: 1}, binding: [16]byte{4}, after: "k", prev: "c"},
	}
	for _, p := range cases {
		s := c.encode(p)
		assert.Regexp(t, `^[A-Za-z0-9_-]+$`, s, "URL-safe")
		got, e := c.decode(s, "since")
		require.Nil(t, e)
		assert.Equal(t, p, got)
		assert.NotEqual(t, s, c.encode(p), "a fresh nonce each time")
	}

	s := c.encode(cases[0])
	bad := map[string]string{
		"another key": newPositionCodec([]byte("fedcba9876543210fedcba9876543210")).encode(cases[0]),
		"not base64":  "!!",
		"too short":   "AQID",
		"too long":    strings.Repeat("A", maxPositionLen+1),
		"another version": func() string {
			b, _ := base64.RawURLEncoding.DecodeString(s)
			b[0] = 9
			return base64.RawURLEncoding.EncodeToString(b)
		}(),
		"altered": func() string {
			b, _ := base64.RawURLEncoding.DecodeString(s)
			b[len(b)-1] ^= 1
			return base64.RawURLEncoding.EncodeToString(b)
		}(),
		"a cursor": newCursorCodec(key).encode([16]byte{}, keyset{value: bson.RawValue{Type: bson.TypeNull}, id: "a"}),
	}
	for name, in := range bad {
		_, e := c.decode(in, "Last-Event-ID")
		require.NotNil(t, e, name)
		assert.Equal(t, 400, e.Status, name)
		assert.Equal(t, CodeBadPosition, e.Code, name)
		assert.Equal(t, "Last-Event-ID", e.Details["param"], name)
	}
}

// TestPositionOrder: positions order by cluster time, then by the changes covered at it; a
// snapshot's position (all changes at T) resumes right after T.
func TestPositionOrder(t *testing.T) {
	a := streamPos{ts: bson.Timestamp{T: 5, I: 1}, n: 2}
	b := streamPos{ts: bson.Timestamp{T: 5, I: 1}, n: 3}
	c := streamPos{ts: bson.Timestamp{T: 5, I: 2}}
	assert.True(t, a.less(b))
	assert.True(t, b.less(c))
	assert.False(t, c.less(a))
	ts, skip := a.start()
	assert.Equal(t, bson.Timestamp{T: 5, I: 1}, ts)
	assert.EqualValues(t, 2, skip)
	ts, skip = allAt("d", "c", bson.Timestamp{T: 5, I: ^uint32(0)}).start()
	assert.Equal(t, bson.Timestamp{T: 6, I: 0}, ts)
	assert.EqualValues(t, 0, skip)
}
