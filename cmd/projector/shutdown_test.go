package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/internal/process"
	"github.com/jetbus/jetbus/partition"
)

// childArgs carries the command line of a projector run as a subprocess (this test binary
// again, in TestProcessChild), separated by \x1f.
const childArgs = "JETBUS_PROJECTOR_CHILD_ARGS"

// TestProcessChild is the body of a projector subprocess: main, with the arguments from the
// environment. In a normal run it is skipped.
func TestProcessChild(t *testing.T) {
	args := os.Getenv(childArgs)
	if args == "" {
		t.Skip("runs only as a subprocess of the process tests")
	}
	ctx, stop := process.SignalContext(context.Background(), os.Stderr, os.Exit)
	code := run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// projectorProc is `projector run` as a process.
type projectorProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

func startProjector(t *testing.T, args ...string) *projectorProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
	p := &projectorProc{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("projector %d output:\n%s", cmd.Process.Pid, p.out)
		}
	})
	return p
}

// TestSIGTERMReleasesLeases: two `projector run` processes share a projection's partitions;
// SIGTERM to one makes it write and acknowledge what it holds, release its leases and exit 0,
// and the other owns every partition well before the lease TTL would have passed. The view
// then holds every event.
func TestSIGTERMReleasesLeases(t *testing.T) {
	d := newDeployment(t)
	a := startProjector(t, "run", "--config", d.config, "--http-addr", freeAddr(t))
	b := startProjector(t, "run", "--config", d.config, "--http-addr", freeAddr(t))
	js := d.bus.JetStream()
	status := func() *partition.GroupStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := partition.Status(ctx, js, "orders", "orders-view")
		if err != nil {
			return nil
		}
		return st
	}
	require.Eventually(t, func() bool {
		st := status()
		return st != nil && len(st.Members) == 2 && st.Balanced()
	}, 60*time.Second, 20*time.Millisecond, "the two projectors share the partitions")
	d.publish(t, 100)

	// Watch the leases: a released lease is deleted (KeyValueDelete); an expired one would
	// show as another removal.
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	kv, err := js.KeyValue(wctx, partition.GroupBucket("orders-view"))
	require.NoError(t, err)
	w, err := kv.Watch(wctx, "l.orders.*", natsjs.UpdatesOnly())
	require.NoError(t, err)
	var mu sync.Mutex
	var removals []natsjs.KeyValueOp
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Operation() != natsjs.KeyValuePut {
				mu.Lock()
				removals = append(removals, e.Operation())
				mu.Unlock()
			}
		}
	}()

	t0 := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
		require.NoError(t, a.err, "SIGTERM: exit status 0")
	case <-time.After(30 * time.Second):
		t.Fatal("the projector did not exit after SIGTERM")
	}
	require.Eventually(t, func() bool {
		st := status()
		return st != nil && len(st.Members) == 1 && st.Balanced()
	}, partition.DefaultTTL, 10*time.Millisecond, "the other projector takes every partition")
	took := time.Since(t0)
	t.Logf("SIGTERM to every partition owned by the other projector: %s (lease TTL %s)", took, partition.DefaultTTL)
	assert.Less(t, took, partition.DefaultTTL, "well before the lease TTL")
	mu.Lock()
	assert.NotEmpty(t, removals, "the stopped projector's leases were removed")
	for _, op := range removals {
		assert.Equal(t, natsjs.KeyValueDelete, op, "a lease released, not expired")
	}
	mu.Unlock()
	require.NoError(t, w.Stop())

	d.publish(t, 100)
	require.Eventually(t, func() bool {
		c, err := d.bus.Cursor(context.Background(), "orders", "orders-view")
		return err == nil && c.Lag() == 0
	}, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(10), d.count(t, "orders"))
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-b.exited:
		require.NoError(t, b.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the second projector did not exit after SIGTERM")
	}
}
