package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIngressConfigChecked: ingress's settings are checked offline with their key paths; a
// reply prefix that is not an inbox is refused before the bridge runs.
func TestIngressConfigChecked(t *testing.T) {
	cases := []struct {
		name, ingress, want string
	}{
		{"system subjects", "  reply_prefixes: [_INBOX, $JS.API]\n", `ingress.reply_prefixes[1]: "$JS.API" is not an inbox prefix`},
		{"a wildcard", "  reply_prefixes: [\"_INBOX.>\"]\n", `ingress.reply_prefixes[0]: "_INBOX.>" holds whitespace or a wildcard`},
		{"ingress's own subjects", "  reply_prefixes: [in.]\n", `ingress.reply_prefixes[0]: "in." is not an inbox prefix`},
		{"no acknowledgement wait", "  ack_timeout: 0s\n", `ingress.ack_timeout`},
		{"no pending buffer", "  max_pending: 0\n", `ingress.max_pending`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "jetbus.yaml")
			body := "topics:\n  - name: orders\ningress:\n  allow: [orders]\n" + tc.ingress
			require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
			code, out, errOut := runArgs(t, "config", "check", file)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out+errOut, tc.want)
		})
	}
	file := filepath.Join(t.TempDir(), "jetbus.yaml")
	require.NoError(t, os.WriteFile(file, []byte("topics:\n  - name: orders\ningress:\n  allow: [orders]\n  reply_prefixes: [_INBOX, _INBOX_app.]\n  ack_timeout: 2s\n  max_pending_bytes: 8MiB\n"), 0o644))
	code, out, errOut := runArgs(t, "config", "check", file)
	assert.Equal(t, 0, code, out+errOut)
}
