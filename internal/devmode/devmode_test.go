package devmode

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestListenAddr(t *testing.T) {
	cases := []struct {
		url, host string
		port      int
		err       string
	}{
		{"nats://127.0.0.1:4222", "127.0.0.1", 4222, ""},
		{"nats://localhost", "127.0.0.1", 1234, ""},
		{"mongodb://[::1]:27017/?replicaSet=rs0", "::1", 27017, ""},
		{"nats://10.0.0.7:4222", "", 0, "loopback only"},
		{"nats://nats.example.com:4222", "", 0, "loopback only"},
		{"::", "", 0, "is not a URL"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			h, p, err := listenAddr(tc.url, "NATS", "1234")
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.host, h)
			assert.Equal(t, tc.port, p)
		})
	}
	assert.Equal(t, available, Available())
}
