package ingress

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/jetbus/jetbus/internal/retry"
)

// service is ingress as a NATS micro service: the endpoint in.> in the queue group
// jetbus-ingress, and the discovery verbs ($SRV.PING, $SRV.INFO, $SRV.STATS, alone, with the
// service's name, and with its ID) answered with the micro protocol's own types, so that
// `nats micro ls|info|stats` find it as they find any micro service.
//
// It is not micro.AddService because a verb's answer goes to whatever reply subject the
// request names: `$SRV.PING` with the reply subject orders.p0 would make the bridge publish
// the service's JSON into the orders stream, with the bridge's rights. Here a verb, like a
// request to in.>, is answered only on a reply subject of Config.ReplyPrefixes (an inbox);
// any other is dropped and counted (ingress_verbs_refused_total).
type service struct {
	g       *Ingress
	id      string
	started time.Time
	meta    map[string]string
	subs    []*nats.Subscription // the verbs'; the endpoint's is ep

	ep *nats.Subscription
	mu sync.Mutex // guards the endpoint's stats
	st micro.EndpointStats
}

// description is the service's, as INFO shows it.
const description = "jetbus ingress: publish a JSON payload to in.<topic>; with a reply subject, the answer is {id, topic, partition, seq, duplicate} once JetStream stored it"

// serve subscribes the endpoint and the verbs on g's connection.
func (g *Ingress) serve() (*service, error) {
	s := &service{g: g, id: nuid.Next(), started: time.Now().UTC(), meta: map[string]string{
		"allow":            strings.Join(g.cfg.Allow, ","),
		"max_message_size": strconv.Itoa(g.cfg.MaxMessageSize),
		"reply_prefixes":   strings.Join(g.cfg.ReplyPrefixes, ","),
	}}
	s.st = micro.EndpointStats{Name: EndpointName, Subject: Subject, QueueGroup: QueueGroup}
	ep, err := g.conn.QueueSubscribe(Subject, QueueGroup, s.handle)
	if err != nil {
		return nil, fmt.Errorf("ingress: subscribe %s: %w", Subject, retry.Opaque(err))
	}
	if err := ep.SetPendingLimits(g.cfg.PendingMsgs, g.cfg.PendingBytes); err != nil {
		_ = ep.Unsubscribe()
		return nil, fmt.Errorf("ingress: pending limits: %w", err)
	}
	s.ep = ep
	g.sub.Store(ep) // for shed and the count of what NATS drops
	for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
		for _, ids := range [][2]string{{"", ""}, {ServiceName, ""}, {ServiceName, s.id}} {
			subj, err := micro.ControlSubject(verb, ids[0], ids[1])
			if err == nil {
				var sub *nats.Subscription
				sub, err = g.conn.Subscribe(subj, func(m *nats.Msg) { s.verb(verb, m) })
				s.subs = append(s.subs, sub)
			}
			if err != nil {
				s.stop()
				return nil, fmt.Errorf("ingress: subscribe %s: %w", subj, retry.Opaque(err))
			}
		}
	}
	// A round trip, so that the server has the subscriptions before ingress says it started:
	// a client's request right after would otherwise find no responders. While disconnected,
	// nats.go sends them again on reconnect; the flush then only times out.
	_ = g.conn.FlushTimeout(5 * time.Second)
	return s, nil
}

// handle is the endpoint: it counts the request as micro does, then hands it to ingress.
func (s *service) handle(m *nats.Msg) {
	start := time.Now()
	if !s.g.shed(m) {
		s.g.handle(m.Subject, m.Reply, m.Header, m.Data)
	}
	took := time.Since(start)
	s.mu.Lock()
	s.st.NumRequests++
	s.st.ProcessingTime += took
	s.st.AverageProcessingTime = s.st.ProcessingTime / time.Duration(s.st.NumRequests)
	s.mu.Unlock()
}

// verb answers a discovery request, on an inbox only.
func (s *service) verb(v micro.Verb, m *nats.Msg) {
	if m.Reply == "" || !s.g.replyAllowed(m.Reply) {
		s.g.m.verbsRefused.Inc()
		s.g.logRefusedVerb(v.String(), m.Reply)
		return
	}
	id := micro.ServiceIdentity{Name: ServiceName, ID: s.id, Version: ServiceVersion, Metadata: s.meta}
	var body any
	switch v {
	case micro.PingVerb:
		body = micro.Ping{ServiceIdentity: id, Type: micro.PingResponseType}
	case micro.InfoVerb:
		body = micro.Info{ServiceIdentity: id, Type: micro.InfoResponseType, Description: description,
			Endpoints: []micro.EndpointInfo{{Name: EndpointName, Subject: Subject, QueueGroup: QueueGroup, Metadata: s.meta}}}
	case micro.StatsVerb:
		s.mu.Lock()
		st := s.st
		s.mu.Unlock()
		st.NumErrors = int(s.g.stats.errors.Load())
		st.LastError = s.g.lastError()
		st.Data, _ = json.Marshal(s.g.Stats())
		body = micro.Stats{ServiceIdentity: id, Type: micro.StatsResponseType, Started: s.started, Endpoints: []*micro.EndpointStats{&st}}
	}
	b, err := json.Marshal(body)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		s.g.log.Debug("ingress: answer "+v.String(), "error", err)
	}
}

// stopVerbs unsubscribes the verbs; drainEndpoint stops the endpoint taking new messages
// while those NATS buffered are still delivered (see Ingress.drain).
func (s *service) stop() {
	for _, sub := range s.subs {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}
	s.subs = nil
	if s.ep != nil {
		_ = s.ep.Drain()
	}
}

// logRefusedVerb logs a discovery request that named no inbox, at most every
// backPressureLogEvery: a flood of them costs a counter, not a log line each.
func (g *Ingress) logRefusedVerb(verb, reply string) {
	if logDue(&g.verbLog) {
		g.log.Warn("ingress: a service discovery request named no inbox to answer on: not answered (counted in ingress_verbs_refused_total)",
			"verb", verb, "reply", reply)
	}
}
