package e2e

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy forwards TCP connections to a backend; cut makes the backend unreachable (every
// connection dropped, new ones closed at once) until heal.
type proxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	down    bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.pipe(c)
	}
}

func (p *proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = b.Close()
		p.drop(c)
		return
	}
	p.conns[b] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	p.drop(c)
	p.drop(b)
	<-done
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// cut drops every connection and refuses new ones until heal.
func (p *proxy) cut() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// heal lets connections through again.
func (p *proxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}
