package snapshotapi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus/snapshotapi"
)

// TestListPosition: a list answers with the position it reflects (Jetbus-Position), opaque
// and URL-safe, on GET, HEAD and 304 alike; an error carries none.
func TestListPosition(t *testing.T) {
	a := newAPI(t, false)
	a.put("orders", doc("a", 1, t0, bson.D{{Key: "status", Value: "paid"}}))
	r := a.get("/v1/views/orders")
	require.Equal(t, 200, r.StatusCode, "%s", r.body)
	pos := r.Header.Get(snapshotapi.PositionHeader)
	require.Regexp(t, `^[A-Za-z0-9_-]{40,}$`, pos)

	head := a.do("HEAD", "/v1/views/orders?status=eq.paid")
	require.Equal(t, 200, head.StatusCode)
	assert.NotEmpty(t, head.Header.Get(snapshotapi.PositionHeader))

	nm := a.get("/v1/views/orders", "If-None-Match", r.Header.Get("ETag"))
	require.Equal(t, 304, nm.StatusCode)
	assert.NotEmpty(t, nm.Header.Get(snapshotapi.PositionHeader))

	bad := a.get("/v1/views/orders?status=zz.paid")
	require.Equal(t, 400, bad.StatusCode)
	assert.Empty(t, bad.Header.Get(snapshotapi.PositionHeader))
}
