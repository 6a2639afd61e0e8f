package embeddedtest

import (
	"log/slog"
	"os"
	"strings"
	"testing"
)

// LogLevelEnv names the environment variable that sets the level of Logger: debug, info,
// warn (the default) or error.
const LogLevelEnv = "JETBUS_TEST_LOG"

// Logger returns a logger that writes to t's log (shown for failed tests and with -v), at the
// level JETBUS_TEST_LOG names, warn by default.
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if v := os.Getenv(LogLevelEnv); v != "" {
		if err := level.UnmarshalText([]byte(strings.ToUpper(v))); err != nil {
			t.Logf("%s=%q: %v; logging at warn", LogLevelEnv, v, err)
			level = slog.LevelWarn
		}
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
