package jetstream

import (
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetbus/jetbus"
)

type delivered struct {
	msg natsjs.Msg
	de  *deliveryEvent
}

// keyWorkers spread a partition's messages over workers by key (KeyConcurrency). In an
// unordered group keys do not matter: the workers share one queue, and each takes the next
// message when it is free.
type keyWorkers struct {
	pc   *partConsumer
	in   []chan delivered
	wg   sync.WaitGroup
	next int // round robin for keyless events
}

func (pc *partConsumer) startWorkers(n int) *keyWorkers {
	queues, per := n, pc.sub.opts.BatchSize/n+1
	if pc.sub.opts.Unordered {
		queues, per = 1, pc.sub.opts.BatchSize+1
	}
	ws := &keyWorkers{pc: pc, in: make([]chan delivered, queues)}
	for i := range ws.in {
		ws.in[i] = make(chan delivered, per)
	}
	for i := range n {
		ws.wg.Add(1)
		go func(in <-chan delivered) {
			defer ws.wg.Done()
			for d := range in {
				if pc.sub.stopping() && !pc.sub.draining.Load() {
					if pm, ok := d.msg.(*pulled); ok {
						pc.holdBack(pm) // unordered: given back once the pull no longer receives
					}
					continue // ordered: left pending, release returns it (see consume)
				}
				pc.handle(d.msg, d.de)
			}
		}(ws.in[i%queues])
	}
	return ws
}

// dispatch queues a delivery for its worker and returns when it was queued.
func (ws *keyWorkers) dispatch(msg natsjs.Msg, de *deliveryEvent) time.Time {
	var i int // one queue (unordered): any worker takes it
	if len(ws.in) > 1 {
		if key := msg.Headers().Get(jetbus.HeaderKey); key != "" {
			i = int(jetbus.KeyHash(key) % uint64(len(ws.in)))
		} else {
			i = ws.next
			ws.next = (ws.next + 1) % len(ws.in)
		}
	}
	ws.in[i] <- delivered{msg, de}
	return time.Now()
}

// stop lets the workers finish what they were given and waits for them.
func (ws *keyWorkers) stop() {
	for _, in := range ws.in {
		close(in)
	}
	ws.wg.Wait()
}
