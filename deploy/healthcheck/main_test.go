package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte("ok\n"))
		case "/slow":
			time.Sleep(500 * time.Millisecond)
		default:
			http.Error(w, "readyz check failed: nats: not connected", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"ready", []string{srv.URL + "/readyz"}, 0, ""},
		{"not ready", []string{srv.URL + "/other"}, 1, "503 Service Unavailable: readyz check failed: nats: not connected"},
		{"timeout", []string{"-timeout", "50ms", srv.URL + "/slow"}, 1, "context deadline exceeded"},
		{"refused", []string{"http://127.0.0.1:1/readyz"}, 1, "connection refused"},
		{"no URL", nil, 2, "usage: healthcheck"},
		{"two URLs", []string{"http://a", "http://b"}, 2, "usage: healthcheck"},
		{"bad flag", []string{"-nope", "http://a"}, 2, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, tc.code, run(tc.args, &stderr))
			if tc.stderr == "" {
				assert.Empty(t, stderr.String())
			} else {
				assert.Contains(t, stderr.String(), tc.stderr)
			}
		})
	}
}
