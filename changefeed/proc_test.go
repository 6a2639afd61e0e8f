package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/changefeed"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// childEnv carries a childSpec to the test binary re-executed as a feed or drainer process.
const childEnv = "JETBUS_CHANGEFEED_CHILD"

// childSpec is what a child process runs.
type childSpec struct {
	NATS    string                   `json:"nats"`
	Mongo   string                   `json:"mongo"`
	AppName string                   `json:"app_name"`
	Feed    *changefeed.Config       `json:"feed,omitempty"`
	Outbox  *changefeed.OutboxConfig `json:"outbox,omitempty"`
}

func TestMain(m *testing.M) {
	embeddedtest.TestMain(m, func() { os.Exit(runChild(os.Getenv(childEnv))) })
}

// runChild runs one feed or drainer as a process until SIGTERM (or SIGKILL).
func runChild(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fail := func(what string, err error) int {
		log.Error(what, "err", err)
		return 1
	}
	nc, err := nats.Connect(spec.NATS, nats.MaxReconnects(-1))
	if err != nil {
		return fail("nats", err)
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc, jetstream.WithLogger(log))
	if err != nil {
		return fail("bus", err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(spec.Mongo).SetAppName(spec.AppName))
	if err != nil {
		return fail("mongo", err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	if err != nil {
		return fail("dlq", err)
	}
	defer func() { _ = q.Close() }()
	var run func(context.Context) error
	if spec.Feed != nil {
		f, err := changefeed.New(ctx, bus, client, *spec.Feed, changefeed.WithLogger(log), changefeed.WithDeadLetters(q))
		if err != nil {
			return fail("feed", err)
		}
		run = f.Run
	} else {
		d, err := changefeed.NewDrainer(ctx, bus, client, *spec.Outbox, changefeed.WithLogger(log), changefeed.WithDeadLetters(q))
		if err != nil {
			return fail("drainer", err)
		}
		run = d.Run
	}
	log.Info("child running")
	if err := run(ctx); err != nil {
		return fail("run", err)
	}
	return 0
}

// child is a feed or drainer running as a process.
type child struct {
	*embeddedtest.Process
	t *testing.T
}

// startChild re-executes the test binary as a process running spec.
func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := embeddedtest.ChildCommand()
	cmd.Env = append(cmd.Env, childEnv+"="+string(b))
	return &child{Process: embeddedtest.Start(t, "child", cmd), t: t}
}

// stop sends SIGTERM and waits for a clean exit.
func (c *child) stop() {
	c.t.Helper()
	code, _ := c.Stop(syscall.SIGTERM, 30*time.Second)
	require.Equal(c.t, 0, code, "child exit status\n%s", c.Output())
}
