package embeddedtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// MainEnv names the environment variable by which ChildCommand tells TestMain to run main.
const MainEnv = "JETBUS_TEST_MAIN"

// TestMain is the TestMain of a test binary that is also the program under test: started by
// ChildCommand, it runs main instead of the tests and exits 0 when main returns (main may exit
// with a status of its own); otherwise it runs the tests. main reads the command line
// ChildCommand was given in os.Args[1:], and any settings of its own from the environment.
//
//	func TestMain(m *testing.M) { embeddedtest.TestMain(m, main) }
func TestMain(m *testing.M, main func()) {
	if os.Getenv(MainEnv) != "" {
		_ = os.Unsetenv(MainEnv) // main's own children are not main
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ChildCommand returns the command that runs this test binary again with args as its command
// line, for Start: main, through TestMain; in a test binary without it, the tests args select
// (-test.run=^TestChild$), which find their settings in the environment the caller adds to
// cmd.Env.
func ChildCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), MainEnv+"=1")
	return cmd
}

// Process is a command running as a child process of a test, started by Start.
type Process struct {
	// Name names the process in messages: bridge, projector-2, ….
	Name string
	// Cmd is the running command; Cmd.Process.Pid is its process ID.
	Cmd *exec.Cmd

	t      testing.TB
	out    SyncBuffer
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// killWithin bounds the wait for a process to be gone after SIGKILL.
const killWithin = 10 * time.Second

// Start starts cmd as a child process of the test, named name in messages (the command's file
// name when empty), and collects what it writes to stdout and stderr in Output. Writers already
// set in cmd.Stdout and cmd.Stderr receive their stream too (their write errors are ignored),
// for a test that reads one stream alone or keeps the output in a file.
//
// When the test ends, a process still running is killed (SIGKILL) and waited for, and, if the
// test failed, the last lines of its output are logged; with OutputDirEnv set, its whole
// output is written to a file in that directory as well (a fault scenario's cause is often
// far above the last lines).
func Start(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	if name == "" {
		name = filepath.Base(cmd.Path)
	}
	p := &Process{Name: name, Cmd: cmd, t: t, exited: make(chan struct{})}
	if cmd.Stdout != nil && sameWriter(cmd.Stdout, cmd.Stderr) {
		w := tee{&p.out, cmd.Stdout} // one writer: exec copies both streams in one goroutine
		cmd.Stdout, cmd.Stderr = w, w
	} else {
		cmd.Stdout, cmd.Stderr = p.collect(cmd.Stdout), p.collect(cmd.Stderr)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		state := "running: killed at the end of the test"
		if p.Exited() {
			state = fmt.Sprintf("exited: %v", p.err)
		}
		p.Kill()
		if t.Failed() {
			t.Logf("%s (pid %d, %s), last lines of its output:\n%s", name, cmd.Process.Pid, state, p.out.Tail(100))
			p.keepOutput()
		}
	})
	return p
}

// OutputDirEnv names the environment variable of a directory where Start keeps the whole
// output of each process of a failed test, as <test>-<process>-<pid>.log (a test may start
// several processes of one name, one after the other or at once). A relative directory is
// relative to each test package's directory.
const OutputDirEnv = "JETBUS_TEST_OUTPUT"

func (p *Process) keepOutput() {
	dir := os.Getenv(OutputDirEnv)
	if dir == "" {
		return
	}
	name := strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(fmt.Sprintf("%s-%s-%d", p.t.Name(), p.Name, p.Cmd.Process.Pid))
	path := filepath.Join(dir, name+".log")
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(path, []byte(p.out.String()), 0o644)
	}
	if err != nil {
		p.t.Logf("%s: keep its output: %v", p.Name, err)
		return
	}
	p.t.Logf("%s: whole output in %s", p.Name, path)
}

func (p *Process) collect(w io.Writer) io.Writer {
	if w == nil {
		return &p.out
	}
	return tee{&p.out, w}
}

// sameWriter says whether a and b are the same writer, without panicking on writers that
// cannot be compared.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// tee writes to the buffer, then to w, ignoring w's errors: the buffer always gets all.
type tee struct {
	buf *SyncBuffer
	w   io.Writer
}

func (t tee) Write(p []byte) (int, error) {
	_, _ = t.w.Write(p)
	return t.buf.Write(p)
}

// Output is what the process wrote to stdout and stderr, as it writes it.
func (p *Process) Output() *SyncBuffer { return &p.out }

// Done is closed when the process has exited and its output has been collected.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Exited says whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Err is the process's exit as exec.Cmd.Wait reports it: nil for status 0, an *exec.ExitError
// otherwise; nil while the process runs.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// ExitCode is the process's exit status: -1 while it runs or when a signal killed it.
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Wait waits up to within for the process to exit and says whether it did.
func (p *Process) Wait(within time.Duration) bool {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.exited:
		return true
	case <-timer.C:
		return false
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Stop sends sig to the process and waits for it to exit, failing the test when sending fails
// or the process takes longer than within; it returns the exit status and how long the process
// took. Call it from the test's goroutine.
func (p *Process) Stop(sig os.Signal, within time.Duration) (code int, took time.Duration) {
	p.t.Helper()
	begin := time.Now()
	if err := p.Signal(sig); err != nil {
		p.t.Fatalf("%s: send %v: %v", p.Name, sig, err)
	}
	if !p.Wait(within) {
		p.t.Fatalf("%s did not exit within %s of %v", p.Name, within, sig)
	}
	return p.ExitCode(), time.Since(begin)
}

// Kill kills the process (SIGKILL) unless it has exited, and waits for it to be gone; the test
// fails if it is not gone within 10 s.
func (p *Process) Kill() {
	p.t.Helper()
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Kill()
	if !p.Wait(killWithin) {
		p.t.Errorf("%s (pid %d) did not die within %s of SIGKILL", p.Name, p.Cmd.Process.Pid, killWithin)
	}
}

// Await polls the process's output until cond holds of it, the process exits, or within has
// passed, and says whether cond held.
func (p *Process) Await(within time.Duration, cond func(output string) bool) bool {
	held := false
	Poll(within, 10*time.Millisecond, func() bool {
		exited := p.Exited() // before reading: the output of an exited process is whole
		held = cond(p.out.String())
		return held || exited
	})
	return held
}

// LogAddr returns the addr attribute of the first JSON log line in logs whose message is msg
// ("ops server listening", "snapshot API listening"), or "" when there is none yet.
func LogAddr(logs, msg string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var l struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg {
			return l.Addr
		}
	}
	return ""
}
