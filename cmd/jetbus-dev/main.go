// Command jetbus-dev is `make dev`'s entry point: the whole pipeline on one machine from one
// config file. It starts `bridge run --dev` (the embedded NATS server, JetStream stored under
// --data, the MongoDB test backend stored under <data>/mongo, ingress, changefeeds, the DLQ
// sweeper), waits until it is ready, starts `projector run` (the projections and the snapshot
// API) against it, and prints what to try next.
//
// On SIGINT or SIGTERM it stops the projector first (it releases its partitions while NATS is
// still there), then the bridge (which stops the embedded servers last), and exits 0 when both
// stopped cleanly. The children run in their own process group, so a Ctrl-C reaches them only
// through this orderly stop, and on Linux they are killed if this process dies: nothing is left
// holding the ports. The binaries are looked up beside this one (make dev builds all three into
// bin/dev with the dev tag); --bin says where else.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetbus/jetbus/internal/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	config, data, bin     string
	bridgeAddr, projAddr  string
	readyTimeout, stopTTL time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jetbus-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.config, "config", "examples/jetbus.yaml", "the configuration both processes run")
	fs.StringVar(&o.data, "data", "data", "directory of the dev data (JetStream, MongoDB); `make clean` removes it")
	fs.StringVar(&o.bin, "bin", "", "directory of the dev builds of bridge and projector (default: this binary's)")
	fs.StringVar(&o.bridgeAddr, "bridge-http-addr", "127.0.0.1:8080", "the bridge's ops address")
	fs.StringVar(&o.projAddr, "projector-http-addr", "127.0.0.1:8081", "the projector's address: ops endpoints and the snapshot API")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 60*time.Second, "how long each process may take to become ready")
	fs.DurationVar(&o.stopTTL, "stop-timeout", 45*time.Second, "how long each process may take to stop before it is killed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "jetbus-dev: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := config.Load(config.Options{File: o.config, Environ: os.Environ()})
	if err != nil {
		fmt.Fprintf(stderr, "jetbus-dev: %v\n", err)
		return 1
	}
	if o.bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "jetbus-dev: %v\n", err)
			return 1
		}
		o.bin = filepath.Dir(exe)
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	return supervise(o, cfg, sig, stdout, stderr)
}

// supervise runs the two processes until a signal or until one of them exits.
func supervise(o options, cfg *config.Config, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	out := &prefixer{w: stderr}
	bridge, err := startChild(filepath.Join(o.bin, "bridge"), out,
		"run", "--dev", "--dev-dir", o.data, "--config", o.config, "--http-addr", o.bridgeAddr)
	if err != nil {
		fmt.Fprintf(stderr, "jetbus-dev: %v\n", err)
		return 1
	}
	children := []*child{bridge}
	stopAll := func() int {
		code := 0
		for i := len(children) - 1; i >= 0; i-- { // the projector first, the bridge (and its servers) last
			if c := children[i].stop(o.stopTTL); c != 0 {
				code = 1
			}
		}
		return code
	}
	if code, ok := waitReady(o.bridgeAddr, bridge, o.readyTimeout, sig, stderr, stopAll); !ok {
		return code
	}
	proj, err := startChild(filepath.Join(o.bin, "projector"), out,
		"run", "--config", o.config, "--http-addr", o.projAddr)
	if err != nil {
		fmt.Fprintf(stderr, "jetbus-dev: %v\n", err)
		stopAll()
		return 1
	}
	children = append(children, proj)
	if code, ok := waitReady(o.projAddr, proj, o.readyTimeout, sig, stderr, stopAll); !ok {
		return code
	}
	fmt.Fprint(stdout, nextSteps(o, cfg))
	select {
	case s := <-sig:
		fmt.Fprintf(stderr, "jetbus-dev: %s: stopping the projector, then the bridge\n", s)
		return stopAll()
	case <-bridge.exited:
		fmt.Fprintf(stderr, "jetbus-dev: the bridge exited (%v)\n", bridge.err)
	case <-proj.exited:
		fmt.Fprintf(stderr, "jetbus-dev: the projector exited (%v)\n", proj.err)
	}
	stopAll()
	return 1
}

// child is one of the two processes.
type child struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startChild(bin string, out *prefixer, args ...string) (*child, error) {
	name := filepath.Base(bin)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = w.Close() // the child holds its own copy: the reader ends when the child does
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start %s (build it with `make dev`, or pass --bin): %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan struct{})}
	copied := make(chan struct{})
	go func() { out.copyLines(name, r); close(copied) }()
	go func() {
		c.err = cmd.Wait()
		<-copied // every line of its output is written before exited closes
		close(c.exited)
	}()
	return c, nil
}

// stop sends SIGTERM and waits for the exit, killing the process after ttl. It returns the
// process's exit code.
func (c *child) stop(ttl time.Duration) int {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(ttl):
			_ = c.cmd.Process.Kill()
			<-c.exited
			return 1
		}
	}
	return c.cmd.ProcessState.ExitCode()
}

// waitReady polls the process's /readyz until it answers 200. When the process exits or
// timeout passes first, it stops everything and returns 1; when a signal arrives first, it
// stops everything and returns what the stop returned.
func waitReady(addr string, c *child, timeout time.Duration, sig <-chan os.Signal, stderr io.Writer, stopAll func() int) (int, bool) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := client.Get("http://" + addr + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return 0, true
			}
		}
		select {
		case <-c.exited:
			fmt.Fprintf(stderr, "jetbus-dev: the %s exited before it was ready (%v)\n", c.name, c.err)
			stopAll()
			return 1, false
		case <-deadline.C:
			fmt.Fprintf(stderr, "jetbus-dev: the %s was not ready within %s (GET http://%s/readyz)\n", c.name, timeout, addr)
			stopAll()
			return 1, false
		case s := <-sig:
			fmt.Fprintf(stderr, "jetbus-dev: %s: stopping\n", s)
			return stopAll(), false
		case <-tick.C:
		}
	}
}

// nextSteps is what the user can try once both processes are ready.
func nextSteps(o options, cfg *config.Config) string {
	var b strings.Builder
	b.WriteString("\njetbus is running: bridge and projector on " + o.config + "\n\n")
	nats := "nats://127.0.0.1:4222"
	if len(cfg.NATS.URLs) > 0 {
		nats = cfg.NATS.URLs[0]
	}
	if len(cfg.Ingress.Allow) > 0 {
		topic := cfg.Ingress.Allow[0]
		fmt.Fprintf(&b, "  Publish with plain NATS through ingress (NATS CLI; any NATS client works):\n"+
			"    nats --server %s req in.%s -H x-key:o-1 \\\n"+
			"      '{\"id\":\"o-1\",\"version\":1,\"customer\":\"c-1\",\"status\":\"placed\",\"total\":42.5,\"created\":\"2026-01-02T15:04:05Z\"}'\n\n",
			nats, topic)
	}
	for _, v := range cfg.Views {
		fmt.Fprintf(&b, "  Read the view %s over HTTP:\n    curl -s http://%s/v1/views/%s/o-1\n    curl -s 'http://%s/v1/views/%s?limit=10'\n"+
			"  and watch it (its documents, then every change, as Server-Sent Events):\n    curl -N 'http://%s/v1/views/%s?watch=true'\n\n",
			v.Name, o.projAddr, v.Name, o.projAddr, v.Name, o.projAddr, v.Name)
		break
	}
	fmt.Fprintf(&b, "  Operations: http://%s/v1/ops/status and /metrics (bridge), http://%s/v1/ops/status and /metrics (projector)\n",
		o.bridgeAddr, o.projAddr)
	fmt.Fprintf(&b, "  Dead letters: bin/dev/bridge dlq list --nats-url %s\n", nats)
	fmt.Fprintf(&b, "  Data: %s (survives a restart; `make clean` removes it). Ctrl-C stops both.\n\n", o.data)
	return b.String()
}

// prefixer writes each child's output lines with the child's name in front, a line at a time.
type prefixer struct {
	mu sync.Mutex
	w  io.Writer
}

// copyLines writes r's lines until EOF, then closes r.
func (p *prefixer) copyLines(name string, r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		fmt.Fprintf(p.w, "%-9s | %s\n", name, sc.Bytes())
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r) // a line too long for the scanner: drain, never block the child
}
