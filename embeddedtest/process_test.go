package embeddedtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

// codeEnv is the status the child exits with on SIGTERM.
const codeEnv = "JETBUS_EMBEDDEDTEST_CODE"

func TestMain(m *testing.M) { embeddedtest.TestMain(m, child) }

// child writes a line to each stream and exits on SIGTERM with the status codeEnv names.
func child() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Printf("args %s\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintln(os.Stderr, `{"msg":"ops server listening","addr":"127.0.0.1:1234"}`)
	<-term
	var code int
	_, _ = fmt.Sscan(os.Getenv(codeEnv), &code)
	os.Exit(code)
}

func TestProcessStopBySignal(t *testing.T) {
	var stdout embeddedtest.SyncBuffer
	cmd := embeddedtest.ChildCommand("run", "--flag")
	cmd.Env = append(cmd.Env, codeEnv+"=3")
	cmd.Stdout = &stdout
	p := embeddedtest.Start(t, "child", cmd)
	var addr string
	require.True(t, p.Await(30*time.Second, func(out string) bool {
		addr = embeddedtest.LogAddr(out, "ops server listening")
		return addr != ""
	}), "the child logs its address:\n%s", p.Output())
	assert.Equal(t, "127.0.0.1:1234", addr)
	require.True(t, p.Await(30*time.Second, func(out string) bool { return strings.Contains(out, "args run --flag") }))
	assert.Equal(t, "args run --flag\n", stdout.String(), "a writer set on the command gets its stream alone")
	assert.False(t, p.Exited())
	assert.Equal(t, -1, p.ExitCode(), "running")
	assert.NoError(t, p.Err(), "running")

	code, took := p.Stop(syscall.SIGTERM, 30*time.Second)
	assert.Equal(t, 3, code)
	assert.Less(t, took, 30*time.Second)
	assert.True(t, p.Exited())
	assert.Equal(t, 3, p.ExitCode())
	assert.Error(t, p.Err())
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is closed once the process exited")
	}
	assert.False(t, p.Await(time.Minute, func(string) bool { return false }), "Await returns when the process has exited")
}

func TestProcessKill(t *testing.T) {
	p := embeddedtest.Start(t, "", embeddedtest.ChildCommand())
	assert.Equal(t, "embeddedtest.test", p.Name, "named after the command's file by default")
	require.True(t, p.Await(30*time.Second, func(out string) bool { return strings.Contains(out, "listening") }))
	p.Kill()
	assert.True(t, p.Exited())
	assert.Equal(t, -1, p.ExitCode(), "killed by a signal")
	p.Kill() // a second time: nothing to do
}

// TestProcessCleanup: a process still running when its test ends is killed and waited for.
func TestProcessCleanup(t *testing.T) {
	var p *embeddedtest.Process
	t.Run("starts", func(t *testing.T) {
		p = embeddedtest.Start(t, "left running", embeddedtest.ChildCommand())
	})
	assert.True(t, p.Exited(), "the cleanup killed it and waited")
}

func TestTestMainRunsTheTests(t *testing.T) {
	// The test binary started otherwise than by ChildCommand runs its tests: -test.run selects
	// none here.
	p := embeddedtest.Start(t, "tests", exec.Command(os.Args[0], "-test.run=^$"))
	require.True(t, p.Wait(30*time.Second))
	assert.Equal(t, 0, p.ExitCode())
	assert.Contains(t, p.Output().String(), "PASS")
}

func TestSyncBuffer(t *testing.T) {
	var b embeddedtest.SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				_, _ = fmt.Fprintf(&b, "%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	assert.Len(t, strings.Split(strings.TrimSpace(b.String()), "\n"), 800)
	got := b.Bytes()
	got[0] = '!'
	assert.NotEqual(t, byte('!'), b.String()[0], "Bytes is a copy")

	var c embeddedtest.SyncBuffer
	assert.Equal(t, "", c.Tail(3))
	c.Write([]byte("a\nb\nc\nd\n"))
	assert.Equal(t, "b\nc\nd", c.Tail(3))
	assert.Equal(t, "a\nb\nc\nd", c.Tail(10))
}

func TestLogAddr(t *testing.T) {
	logs := "not json\n" + `{"msg":"snapshot API listening","addr":"127.0.0.1:2"}` + "\n" + `{"msg":"ops server listening","addr":"127.0.0.1:1"}` + "\n"
	assert.Equal(t, "127.0.0.1:1", embeddedtest.LogAddr(logs, "ops server listening"))
	assert.Equal(t, "127.0.0.1:2", embeddedtest.LogAddr(logs, "snapshot API listening"))
	assert.Equal(t, "", embeddedtest.LogAddr(logs, "other"))
}
