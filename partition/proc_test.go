package partition_test

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

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
)

// childEnv carries a childSpec to the test binary re-executed as a member process.
const childEnv = "JETBUS_PARTITION_CHILD"

// childSpec is the member a child process runs: one partition.Subscribe with the default TTL
// and a handler that acknowledges every event, on a connection named after the member.
type childSpec struct {
	URLs          string        `json:"urls"`
	Member        string        `json:"member"`
	Topic         string        `json:"topic"`
	Group         string        `json:"group"`
	Fenced        bool          `json:"fenced"`
	Replicas      int           `json:"replicas"`
	ReconnectWait time.Duration `json:"reconnect_wait"`
}

func TestMain(m *testing.M) {
	embeddedtest.TestMain(m, func() { os.Exit(runChild(os.Getenv(childEnv))) })
}

// runChild runs one member as a process until SIGTERM (or SIGKILL).
func runChild(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Connected to the first URL first (the test chooses the node), reconnecting as the
	// processes do (internal/process: forever, ReconnectWait 250ms, jitter up to 100ms)
	// unless told otherwise.
	nc, err := nats.Connect(spec.URLs, nats.Name(spec.Member), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(spec.ReconnectWait), nats.ReconnectJitter(100*time.Millisecond, 250*time.Millisecond))
	if err != nil {
		log.Error("nats", "err", err)
		return 1
	}
	defer nc.Close()
	bus, err := jetstream.Open(ctx, nc, jetstream.WithLogger(log))
	if err != nil {
		log.Error("bus", "err", err)
		return 1
	}
	sub, err := partition.Subscribe(ctx, bus, bus.JetStream(), partition.Config{
		Topic: spec.Topic, Group: spec.Group, MemberID: spec.Member, Replicas: spec.Replicas, Fenced: spec.Fenced, Logger: log,
	}, func(context.Context, *jetbus.Delivery) error { return nil }, jetbus.FromEarliest())
	if err != nil {
		log.Error("subscribe", "err", err)
		return 1
	}
	log.Info("child subscribed")
	<-ctx.Done()
	_ = sub.Stop()
	return 0
}

// startMemberProcess re-executes the test binary as a process running spec.
func startMemberProcess(t *testing.T, spec childSpec) *embeddedtest.Process {
	t.Helper()
	if spec.ReconnectWait == 0 {
		spec.ReconnectWait = 250 * time.Millisecond
	}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := embeddedtest.ChildCommand()
	cmd.Env = append(cmd.Env, childEnv+"="+string(b))
	return embeddedtest.Start(t, "member-"+spec.Member, cmd)
}
