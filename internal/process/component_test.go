package process_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/process"
)

// fake is a component that runs until its context ends, then takes drain to stop.
type fake struct {
	name    string
	drain   time.Duration
	fail    error // returned at once when set
	notRdy  error
	started chan struct{}
	stopped chan struct{}
}

func newFake(name string) *fake {
	return &fake{name: name, started: make(chan struct{}), stopped: make(chan struct{})}
}

func (f *fake) Name() string { return f.name }
func (f *fake) Run(ctx context.Context) error {
	close(f.started)
	defer close(f.stopped)
	if f.fail != nil {
		return f.fail
	}
	<-ctx.Done()
	if f.drain > 0 {
		t := time.NewTimer(f.drain)
		defer t.Stop()
		<-t.C
	}
	return ctx.Err()
}
func (f *fake) Ready(context.Context) error         { return f.notRdy }
func (f *fake) Status(context.Context) (any, error) { return map[string]string{"position": "42"}, nil }
func (f *fake) waitStarted(t *testing.T)            { t.Helper(); <-f.started }

func TestRunner(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		comps   func() []*fake
		cancel  bool // cancel the context once everything started
		drain   time.Duration
		wantErr error
	}{
		{"stops on signal and returns nil", func() []*fake { return []*fake{newFake("a"), newFake("b")} }, true, 5 * time.Second, nil},
		{"a failure stops the others", func() []*fake { f := newFake("bad"); f.fail = boom; return []*fake{newFake("a"), f} }, false, 5 * time.Second, boom},
		{"a component slower than the deadline", func() []*fake { f := newFake("slow"); f.drain = time.Minute; return []*fake{f} }, true, 50 * time.Millisecond, process.ErrShutdownTimeout},
		{"no components: waits for the signal", func() []*fake { return nil }, true, time.Second, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fakes := tc.comps()
			comps := make([]process.Component, len(fakes))
			for i, f := range fakes {
				comps[i] = f
			}
			r, err := process.NewRunner(embeddedtest.Logger(t), comps...)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx, tc.drain) }()
			for _, f := range fakes {
				f.waitStarted(t)
			}
			if tc.cancel {
				select {
				case err := <-done:
					t.Fatalf("returned before the signal: %v", err)
				default:
				}
				cancel()
			}
			select {
			case err := <-done:
				if tc.wantErr == nil {
					assert.NoError(t, err)
				} else {
					assert.ErrorIs(t, err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			for _, f := range fakes {
				if f.drain < time.Minute {
					<-f.stopped // every goroutine waited for
				}
			}
		})
	}
}

func TestRunnerReadyAndStatus(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	b.notRdy = errors.New("catching up")
	r, err := process.NewRunner(nil, a, b)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, time.Second) }()
	a.waitStarted(t)
	b.waitStarted(t)
	require.Eventually(t, func() bool { return r.Statuses(ctx, false)[0].State == process.StateRunning }, 5*time.Second, time.Millisecond)
	assert.EqualError(t, r.Ready(ctx), "b: catching up")
	st := r.Statuses(ctx, true)
	require.Len(t, st, 2)
	assert.True(t, st[0].Ready)
	assert.False(t, st[1].Ready)
	assert.Equal(t, map[string]string{"position": "42"}, st[0].Detail)
	cancel()
	require.NoError(t, <-done)
	st = r.Statuses(context.Background(), false)
	assert.Equal(t, process.StateStopped, st[0].State)
	assert.Error(t, r.Ready(context.Background()), "stopped components are not ready")

	_, err = process.NewRunner(nil, newFake("x"), newFake("x"))
	assert.Error(t, err, "names are unique")
}

// TestSignalContext: the first SIGTERM cancels the context; a second exits at once with 1.
func TestSignalContext(t *testing.T) {
	var stderr embeddedtest.SyncBuffer
	exited := make(chan int, 1)
	ctx, stop := process.SignalContext(context.Background(), &stderr, func(code int) { exited <- code })
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first signal did not cancel")
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case code := <-exited:
		assert.Equal(t, 1, code)
	case <-time.After(5 * time.Second):
		t.Fatal("second signal did not exit")
	}
	assert.Contains(t, stderr.String(), "exiting without draining")
}
