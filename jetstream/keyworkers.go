package jetstream

import (
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

type delivered struct {
	msg  natsjs.Msg
	meta *natsjs.MsgMetadata
}

// keyWorkers spread a partition's messages over workers by key (KeyConcurrency).
type keyWorkers struct {
	pc   *partConsumer
	in   []chan delivered
	wg   sync.WaitGroup
	next int // round robin for keyless events
}

func (pc *partConsumer) startWorkers(n int) *keyWorkers {
	ws := &keyWorkers{pc: pc, in: make([]chan delivered, n)}
	for i := range ws.in {
		ws.in[i] = make(chan delivered, pc.sub.opts.BatchSize/n+1)
		ws.wg.Add(1)
		go func(in <-chan delivered) {
			defer ws.wg.Done()
			for d := range in {
				if pc.sub.stopping() && !pc.sub.draining.Load() {
					continue // left pending: release returns it (see consume)
				}
				pc.handle(d.msg, d.meta)
			}
		}(ws.in[i])
	}
	return ws
}

func (ws *keyWorkers) dispatch(msg natsjs.Msg, meta *natsjs.MsgMetadata) {
	var i int
	if key := msg.Headers().Get(jetbus.HeaderKey); key != "" {
		i = int(jetbus.KeyHash(key) % uint64(len(ws.in)))
	} else {
		i = ws.next
		ws.next = (ws.next + 1) % len(ws.in)
	}
	ws.in[i] <- delivered{msg, meta}
}

// stop lets the workers finish what they were given and waits for them.
func (ws *keyWorkers) stop() {
	for _, in := range ws.in {
		close(in)
	}
	ws.wg.Wait()
}
