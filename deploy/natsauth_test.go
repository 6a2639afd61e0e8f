package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/ingress"
	"github.com/jetbus/jetbus/internal/config"
	"github.com/jetbus/jetbus/internal/wiring"
	jbjs "github.com/jetbus/jetbus/jetstream"
	"github.com/jetbus/jetbus/partition"
	"github.com/jetbus/jetbus/schema"
)

// natsAuthFile is the users and permissions every node includes.
const natsAuthFile = "nats/auth.conf"

// The users of nats/auth.conf.
const (
	userBridge    = "bridge"
	userProjector = "projector"
	userProducer  = "producer"
	userClient    = "client"
	userAdmin     = "admin"
)

var natsUsers = []string{userBridge, userProjector, userProducer, userClient, userAdmin}

// natsInboxPrefixes are the inbox prefixes (nats.inbox_prefix) the trusted users' connections
// use: the subjects their users may subscribe to, and the client user may not.
var natsInboxPrefixes = map[string]string{userBridge: "_INBOX_bridge", userProjector: "_INBOX_projector", userProducer: "_INBOX_producer"}

// natsSecret is the Kubernetes Secret of the users' passwords, one key each (natsSecretKey),
// read by the NATS servers (k8s/nats-values.yaml) and by the processes (k8s/base).
const natsSecret = "jetbus-nats"

func natsSecretKey(user string) string { return user + "-password" }

// natsPasswordEnv is the server's environment variable auth.conf reads user's password from.
func natsPasswordEnv(user string) string { return "NATS_" + strings.ToUpper(user) + "_PASSWORD" }

// natsPassword is the password the tests give user (as openssl rand -hex 24 would: a string to
// NATS's configuration parser).
func natsPassword(user string) string { return "5e1f" + fmt.Sprintf("%x", user) + "c0ffee" }

// natsPasswords sets every user's password in the environment, for t.
func natsPasswords(t *testing.T) {
	for _, u := range natsUsers {
		t.Setenv(natsPasswordEnv(u), natsPassword(u))
	}
}

// permits says whether p lets a subject through: a NATS permission's allow list (nil: all)
// less its deny list. An entry "subject queue" (a queue subscription) counts by its subject.
func permits(p *server.SubjectPermission, subject string) bool {
	if p == nil {
		return true
	}
	ok := p.Allow == nil
	for _, a := range p.Allow {
		if server.SubjectMatchesFilter(subject, strings.Fields(a)[0]) {
			ok = true
		}
	}
	for _, d := range p.Deny {
		if server.SubjectMatchesFilter(subject, strings.Fields(d)[0]) {
			return false
		}
	}
	return ok
}

func canPublish(u *server.User, subject string) bool {
	return u.Permissions == nil || permits(u.Permissions.Publish, subject)
}

func canSubscribe(u *server.User, subject string) bool {
	return u.Permissions == nil || permits(u.Permissions.Subscribe, subject)
}

// usersByName are the users of o.
func usersByName(o *server.Options) map[string]*server.User {
	m := map[string]*server.User{}
	for _, u := range o.Users {
		m[u.Username] = u
	}
	return m
}

// TestNATSUsers: every node requires the same users, each with its password from the
// environment; and, read as nats-server reads them, their permissions cover what the deploy
// configuration's processes do and keep every user but the bridge and the projector away from
// jetbus's internals. The servers enforcing them is TestNATSClientIsRefusedFromTheWire and
// TestNATSUsersRunJetbus.
func TestNATSUsers(t *testing.T) {
	var first map[string]*server.User
	for _, node := range natsNodes {
		o := natsOptions(t, natsConfigFile(node))
		users := usersByName(o)
		require.ElementsMatch(t, natsUsers, slices.Collect(maps.Keys(users)), "%s: users", node)
		for _, n := range natsUsers {
			assert.Equal(t, natsPassword(n), users[n].Password, "%s: %s's password is $%s", node, n, natsPasswordEnv(n))
		}
		if first == nil {
			first = users
			continue
		}
		for n, u := range users {
			assert.Equal(t, first[n].Permissions, u.Permissions, "%s: %s's permissions differ from %s's", node, n, natsNodes[0])
		}
	}
	users := first
	bridge, projector, producer, client, admin := users[userBridge], users[userProjector], users[userProducer], users[userClient], users[userAdmin]
	assert.Nil(t, admin.Permissions, "admin: everything (the nats CLI)")

	cfg, err := config.Load(config.Options{File: deployConfig})
	require.NoError(t, err)
	changefed := map[string]bool{}
	for _, fc := range cfg.Changefeeds {
		changefed[fc.Topic] = true
	}

	// Events: the bridge publishes every topic (ingress, changefeeds, dlq replay), a producer
	// the topics no changefeed writes, nobody else.
	for _, tc := range cfg.Topics {
		stream := jetbus.StreamName(tc.Name)
		for p := range tc.Partitions {
			subject := fmt.Sprintf("%s.p%d", tc.Name, p)
			if tc.Keyed {
				subject += ".k"
			}
			assert.True(t, canPublish(bridge, subject), "bridge: publish %s (topic %s: add it to %s)", subject, tc.Name, natsAuthFile)
			assert.Equal(t, !changefed[tc.Name], canPublish(producer, subject), "producer: publish %s", subject)
			assert.False(t, canPublish(projector, subject), "projector: publish %s", subject)
			assert.False(t, canPublish(client, subject), "client: publish %s", subject)
		}
		// Any in.<topic>: ingress, not the server, knows which topics are open (ingress.allow),
		// and dead-letters the rest.
		assert.True(t, canPublish(client, "in."+tc.Name), "client: publish in.%s", tc.Name)
		for _, u := range []*server.User{bridge, projector} {
			for _, verb := range []string{"STREAM.INFO", "STREAM.CREATE", "STREAM.UPDATE", "CONSUMER.INFO." + stream + ".g_p0.x", "CONSUMER.MSG.NEXT." + stream + ".g_p0.x"} {
				api := "$JS.API." + verb + "." + stream
				if strings.HasPrefix(verb, "CONSUMER") {
					api = "$JS.API." + strings.TrimSuffix(verb, ".x")
				}
				assert.True(t, canPublish(u, api), "%s: publish %s", u.Username, api)
			}
		}
		assert.Equal(t, !changefed[tc.Name], canPublish(producer, "$JS.API.STREAM.INFO."+stream), "producer: the partitions of %s", tc.Name)
		// Only an operator deletes a topic.
		for _, u := range []*server.User{bridge, projector, producer, client} {
			assert.False(t, canPublish(u, "$JS.API.STREAM.DELETE."+stream), "%s: delete stream %s (topic %s: deny it in %s)", u.Username, stream, tc.Name, natsAuthFile)
			assert.False(t, canPublish(u, "$JS.API.STREAM.PURGE."+stream), "%s: purge stream %s", u.Username, stream)
		}
	}
	// A changefeed's lease bucket.
	for _, fc := range cfg.Changefeeds {
		subject := "$KV.jetbus_group_changefeed_" + fc.Name + ".l.changefeed.p0"
		assert.True(t, canPublish(bridge, subject), "bridge: the lease of changefeed %s (add it to %s)", fc.Name, natsAuthFile)
		assert.False(t, canPublish(projector, subject), "projector: the lease of changefeed %s (deny it in %s)", fc.Name, natsAuthFile)
		assert.False(t, canPublish(projector, "$JS.API.STREAM.DELETE.KV_jetbus_group_changefeed_"+fc.Name), "projector: delete the leases of changefeed %s", fc.Name)
	}
	// The DLQ's settings and its advisories are the bridge's; the projector attaches to it.
	for _, stream := range []string{dlq.StreamName, dlq.RejectsStreamName, dlq.AdvisoryStreamName, "KV_" + dlq.ParkBucket, "KV_" + dlq.ReplayBucket} {
		assert.True(t, canPublish(bridge, "$JS.API.STREAM.UPDATE."+stream), "bridge: apply the settings of %s", stream)
		assert.False(t, canPublish(projector, "$JS.API.STREAM.UPDATE."+stream), "projector: change the limits of %s", stream)
	}
	assert.False(t, canPublish(projector, "$JS.ACK.DLQ_ADVISORIES.jetbus-sweeper.1.2.3.4.5"), "projector: swallow the sweeper's advisories")
	assert.False(t, canPublish(projector, "$JS.ACK._.acchash.DLQ_ADVISORIES.jetbus-sweeper.1.2.3.4.5.x"), "projector: swallow the sweeper's advisories, v2 format")
	for _, oc := range cfg.Outbox {
		subject := "$KV.jetbus_group_outbox_" + oc.Name + ".l.outbox.p0"
		assert.True(t, canPublish(bridge, subject), "bridge: the lease of outbox %s (add it to %s)", oc.Name, natsAuthFile)
	}
	// A projection's group, and its generations after rebuilds.
	for _, pc := range cfg.Projections {
		for _, group := range []string{pc.Name, pc.Name + "-g1", pc.Name + "-g12"} {
			assert.True(t, canPublish(projector, "$KV.jetbus_group_"+group+".m.orders.member"), "projector: membership in %s", group)
			assert.True(t, canPublish(projector, "$KV.jetbus_assignments."+group+".orders"), "projector: assignment of %s", group)
			assert.True(t, canPublish(projector, "$JS.API.STREAM.CREATE.KV_jetbus_group_"+group), "projector: bucket of %s", group)
			assert.True(t, canPublish(projector, "$JS.API.STREAM.DELETE.KV_jetbus_group_"+group), "projector: rebuild drops the bucket of %s", group)
			assert.True(t, canPublish(projector, "$JS.ACK.orders."+group+"_p0.1.2.3.4.5"), "projector: acknowledge %s", group)
			assert.False(t, canPublish(bridge, "$KV.jetbus_group_"+group+".l.orders.p0"), "bridge: the leases of %s", group)
		}
	}

	// jetbus's own streams and buckets.
	for _, b := range []string{schema.DefaultBucket, "jetbus_changefeeds", dlq.ParkBucket, dlq.ReplayBucket} {
		assert.True(t, canPublish(bridge, "$KV."+b+".k"), "bridge: write %s", b)
	}
	for _, b := range []string{schema.DefaultBucket, "jetbus_changefeeds", dlq.ReplayBucket} {
		assert.False(t, canPublish(projector, "$KV."+b+".k"), "projector: write %s (the bridge's)", b)
	}
	for _, stream := range []string{dlq.StreamName, dlq.AdvisoryStreamName, "KV_" + schema.DefaultBucket, "KV_jetbus_assignments",
		"KV_jetbus_changefeeds", "KV_" + dlq.ParkBucket, "KV_" + dlq.ReplayBucket, "KV_jetbus_snapshotapi"} {
		for _, u := range []*server.User{bridge, projector, producer, client} {
			assert.False(t, canPublish(u, "$JS.API.STREAM.DELETE."+stream), "%s: delete %s", u.Username, stream)
		}
	}
	assert.True(t, canPublish(bridge, "$JS.API.STREAM.MSG.DELETE.DLQ"), "bridge: dlq replay and discard")
	assert.False(t, canPublish(bridge, "$JS.API.STREAM.MSG.DELETE.orders"), "bridge: delete an event")
	assert.True(t, canPublish(bridge, "$JS.ACK.DLQ_ADVISORIES.jetbus-sweeper.1.2.3.4.5"), "bridge: the sweeper's acks")
	assert.True(t, canPublish(bridge, "$JS.ACK._.acchash.DLQ_ADVISORIES.jetbus-sweeper.1.2.3.4.5.x"), "bridge: the sweeper's acks, v2 format")
	for _, u := range []*server.User{bridge, projector} {
		assert.True(t, canPublish(u, "dlq.orders"), "%s: dead-letter", u.Username)
	}

	// Ingress: the bridge serves in.> in its queue group and the micro verbs, and answers.
	require.NotNil(t, bridge.Permissions.Response, "bridge: allow_responses (it answers requests)")
	assert.Equal(t, 1, bridge.Permissions.Response.MaxMsgs, "bridge: one answer per request")
	assert.Contains(t, bridge.Permissions.Subscribe.Allow, ingress.Subject+" "+ingress.QueueGroup, "bridge: in.> in its queue group, and only so")
	assert.NotContains(t, bridge.Permissions.Subscribe.Allow, ingress.Subject, "bridge: in.> outside its queue group")
	for _, verb := range []string{"$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.PING.jetbus-ingress", "$SRV.STATS.jetbus-ingress.id"} {
		assert.True(t, canSubscribe(bridge, verb), "bridge: serve %s", verb)
		assert.True(t, canPublish(client, verb), "client: ask %s", verb)
	}
	for _, u := range []*server.User{producer, client} {
		assert.Nil(t, u.Permissions.Response, "%s answers no requests", u.Username)
	}

	// Liveness probes between the members of a projector's groups ($JETBUS.LIVE.<group>.<member>,
	// package partition): the projector subscribes and answers its own, once per probe, and
	// probes the others; nobody else sends a probe or answers one in a member's place.
	require.NotNil(t, projector.Permissions.Response, "projector: allow_responses (it answers liveness probes)")
	assert.Equal(t, 1, projector.Permissions.Response.MaxMsgs, "projector: one answer per probe")
	for _, pc := range cfg.Projections {
		for _, group := range []string{pc.Name, pc.Name + "-g1"} {
			live := liveSubject(group, "0198c2a4-7e1d-7b3a-9f00-3c1a2b4d5e6f")
			assert.True(t, canSubscribe(projector, live), "projector: answer on %s", live)
			assert.True(t, canPublish(projector, live), "projector: probe %s", live)
			for _, u := range []*server.User{bridge, producer, client} {
				assert.False(t, canSubscribe(u, live), "%s: subscribe %s", u.Username, live)
				assert.False(t, canPublish(u, live), "%s: publish %s", u.Username, live)
			}
		}
	}

	// Replies: each trusted user on its own inbox prefix, the client on _INBOX.
	for user, prefix := range natsInboxPrefixes {
		for _, other := range []*server.User{bridge, projector, producer, client} {
			assert.Equal(t, other.Username == user, canSubscribe(other, prefix+".x.y"), "%s: subscribe %s.>", other.Username, prefix)
		}
	}
	assert.True(t, canSubscribe(client, "_INBOX.x.y"), "client: its replies")

	// Nobody but an operator forges what jetbus trusts: advisories, API answers, acks.
	for _, u := range []*server.User{bridge, projector, producer, client} {
		for _, subject := range []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.orders.orders-view_p0", "$JS.API.STREAM.PURGE.orders",
			"$JS.API.CONSUMER.DURABLE.CREATE.orders.x", "$JS.API.META.LEADER.STEPDOWN", "$JS.API.ACCOUNT.PURGE.x"} {
			assert.False(t, canPublish(u, subject), "%s: publish %s", u.Username, subject)
		}
	}
	// Answers into clients' inboxes: the bridge (ingress answers them, also after it moved to
	// another node, where allow_responses no longer knows the request); no one else.
	assert.True(t, canPublish(bridge, "_INBOX.x"), "bridge: answer a client")
	for _, u := range []*server.User{projector, producer, client} {
		assert.False(t, canPublish(u, "_INBOX.x"), "%s: publish into a client's inbox", u.Username)
	}
	for _, subject := range []string{"_INBOX_projector.x", "_INBOX_producer.x"} {
		assert.False(t, canPublish(bridge, subject), "bridge: publish %s (only as an answer to a request)", subject)
	}
	// A projector's answers to probes, also after it moved to another node (where
	// allow_responses no longer knows the probe): into projectors' inboxes, nobody else's.
	assert.True(t, canPublish(projector, "_INBOX_projector.x.y"), "projector: answer a probe after a reconnect")
	for _, subject := range []string{"_INBOX_bridge.x", "_INBOX_producer.x"} {
		assert.False(t, canPublish(projector, subject), "projector: publish %s", subject)
	}
	for _, u := range []*server.User{producer, client} {
		assert.False(t, canPublish(u, "_INBOX_projector.x.y"), "%s: publish into a projector's inbox", u.Username)
	}

	// The client: in.> and the verbs; nothing of jetbus's, no one else's traffic.
	for _, subject := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.orders", "$JS.API.DIRECT.GET.orders", "$JS.API.CONSUMER.CREATE.orders.x",
		"$KV.jetbus_schemas.v.orders.9", "$KV.jetbus_dlq_replays.x", "dlq.orders", "$JS.ACK.orders.orders-view_p0.1.2.3.4.5", "$JS.FC.x.y.z",
		"_INBOX_bridge.x", "$SRV.PING.other", "$SYS.REQ.SERVER.PING"} {
		assert.False(t, canPublish(client, subject), "client: publish %s", subject)
	}
	for _, subject := range []string{"in.orders", ">", "orders.p0", "dlq.orders", "$SRV.PING", "$KV.jetbus_schemas.v.orders.1", "$JS.EVENT.ADVISORY.x"} {
		assert.False(t, canSubscribe(client, subject), "client: subscribe %s", subject)
	}
}

// liveSubject is partition.LiveSubject.
func liveSubject(group, member string) string { return "$JETBUS.LIVE." + group + "." + member }

// serverLog keeps the permission violations a server logs.
type serverLog struct {
	mu         sync.Mutex
	violations []string
}

func (l *serverLog) Noticef(string, ...any) {}
func (l *serverLog) Warnf(string, ...any)   {}
func (l *serverLog) Fatalf(string, ...any)  {}
func (l *serverLog) Debugf(string, ...any)  {}
func (l *serverLog) Tracef(string, ...any)  {}
func (l *serverLog) Errorf(format string, args ...any) {
	if line := fmt.Sprintf(format, args...); strings.Contains(line, "Violation") {
		l.mu.Lock()
		l.violations = append(l.violations, line)
		l.mu.Unlock()
	}
}

func (l *serverLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.violations)
}

// startNATSNode starts nats1 from its configuration file alone: its users and JetStream, its
// cluster left out (one node holds R1 streams), on a free loopback port.
func startNATSNode(t *testing.T) (*server.Server, *serverLog) {
	t.Helper()
	o := natsOptions(t, natsConfigFile(natsNodes[0]))
	o.Host, o.Port, o.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
	o.Cluster, o.Routes = server.ClusterOpts{}, nil
	o.StoreDir = filepath.Join(t.TempDir(), "nats")
	o.NoSigs = true
	s, err := server.NewServer(o)
	require.NoError(t, err)
	log := &serverLog{}
	s.SetLoggerV2(log, false, false, false)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s, log
}

// conn is a connection as one of the users, with the errors the server sent it.
type conn struct {
	*nats.Conn
	errs chan error
}

// connectAs connects to s as user, with its inbox prefix.
func connectAs(t *testing.T, s *server.Server, user string) *conn {
	t.Helper()
	c := &conn{errs: make(chan error, 64)}
	opts := []nats.Option{nats.UserInfo(user, natsPassword(user)), nats.Name("deploy test " + user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		})}
	if p := natsInboxPrefixes[user]; p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(s.ClientURL(), opts...)
	require.NoError(t, err, "connect as %s", user)
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

// refused waits for the server's permissions violation error about subject.
func (c *conn) refused(t *testing.T, what, subject string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("%s to %q", what, subject)) {
				return
			}
		case <-deadline:
			t.Fatalf("the server did not refuse %s to %s", what, subject)
		}
	}
}

// TestNATSClientIsRefusedFromTheWire starts a node from its configuration file, the bridge's
// ingress on it as the bridge user, and shows what the server does with a client user's
// traffic: a request to in.<topic> with an inbox reply is answered, and the service verbs are;
// a publish to a topic's partition, to the JetStream API, a KV bucket, the DLQ or someone's
// inbox, or a liveness probe, is refused with a permissions violation and stores nothing; so is
// a subscription to ingress's subjects, another user's replies or the liveness subjects.
func TestNATSClientIsRefusedFromTheWire(t *testing.T) {
	s, log := startNATSNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	bridge := connectAs(t, s, userBridge)
	bus, err := jbjs.Open(ctx, connectAs(t, s, userBridge).Conn) // ingress has a connection of its own
	require.NoError(t, err)
	defer bus.Close()
	require.NoError(t, bus.EnsureTopic(ctx, jbjs.TopicConfig{Name: "orders", Partitions: 4}))
	q, err := dlq.Open(ctx, bus.JetStream(), dlq.Config{})
	require.NoError(t, err)
	defer q.Close()
	g, err := ingress.New(bridge.Conn, bus, q, ingress.Config{Allow: []string{"orders"}})
	require.NoError(t, err)
	ictx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- g.Run(ictx) }()
	defer func() { stop(); <-ran }()
	require.Eventually(t, func() bool { return g.Ready(ctx) == nil }, 10*time.Second, 20*time.Millisecond, "ingress ready")
	stored := func() uint64 {
		st, err := bus.JetStream().Stream(ctx, "orders")
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}

	client := connectAs(t, s, userClient)
	// Through ingress, with an inbox reply: stored and acknowledged.
	m := nats.NewMsg("in.orders")
	m.Header.Set(jetbus.HeaderKey, "c1")
	m.Data = []byte(`{"id":"o1"}`)
	reply, err := client.RequestMsg(m, 5*time.Second)
	require.NoError(t, err, "client: request in.orders")
	var ack struct {
		ID    string          `json:"id"`
		Seq   uint64          `json:"seq"`
		Error json.RawMessage `json:"error"`
	}
	require.NoError(t, json.Unmarshal(reply.Data, &ack))
	require.Empty(t, ack.Error, "ingress refused: %s", reply.Data)
	assert.Equal(t, uint64(1), ack.Seq)
	// The service's verbs answer the client's inbox.
	info, err := client.Request("$SRV.INFO.jetbus-ingress", nil, 5*time.Second)
	require.NoError(t, err, "client: $SRV.INFO.jetbus-ingress")
	assert.Contains(t, string(info.Data), `"name":"jetbus-ingress"`)

	// Straight to a partition, the JetStream API, a bucket, the DLQ, an inbox: refused.
	for _, subject := range []string{"orders.p1", "$JS.API.STREAM.DELETE.orders", "$JS.API.STREAM.INFO.orders",
		"$KV.jetbus_schemas.v.orders.9", "dlq.orders", "_INBOX.forged", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.orders.x",
		liveSubject("orders-view", "m1")} {
		require.NoError(t, client.Publish(subject, []byte(`{"id":"o2"}`)))
		require.NoError(t, client.Flush())
		client.refused(t, "Publish", subject)
	}
	js, err := natsjs.New(client.Conn)
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second) // unacknowledged: the server dropped it
	_, err = js.Publish(pctx, "orders.p0", []byte(`{}`), natsjs.WithExpectStream("orders"))
	pcancel()
	require.Error(t, err, "client: a JetStream publish to a partition")
	client.refused(t, "Publish", "orders.p0")
	// Stealing ingress's messages, another user's replies or the members' liveness probes:
	// refused.
	for _, subject := range []string{"in.>", "_INBOX_bridge.>", "orders.>", "$JETBUS.LIVE.>"} {
		_, err := client.SubscribeSync(subject)
		require.NoError(t, err)
		require.NoError(t, client.Flush())
		client.refused(t, "Subscription", subject)
	}
	_, err = client.QueueSubscribeSync("in.>", ingress.QueueGroup)
	require.NoError(t, err)
	client.refused(t, "Subscription", "in.>")
	// A request whose reply subject is not an inbox: the bridge may answer any reply subject
	// it is sent (allow_responses); ingress does not, so nothing is published there.
	m = nats.NewMsg("in.orders")
	m.Reply = "$JS.API.STREAM.DELETE.orders"
	m.Data = []byte(`{"id":"o3"}`)
	require.NoError(t, client.PublishMsg(m))
	require.NoError(t, client.Flush())

	require.Eventually(t, func() bool {
		n, err := q.Count(ctx, dlq.Filter{Reason: dlq.ReasonIngress})
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "the request with a reply to the JetStream API is refused and dead-lettered")
	assert.Equal(t, uint64(1), stored(), "only ingress's event is in the topic: nothing refused was stored, the stream is there")
	for _, v := range log.all() {
		assert.Contains(t, v, `/user:client"`, "only the client was refused anything: %s", v)
	}
	assert.NotEmpty(t, log.all(), "the server logs the violations")
}

// TestNATSUsersRunJetbus runs, on a node started from its configuration file, each user
// doing what its process does, through jetbus's own packages, and requires that the server
// refuses none of it: the bridge (topics, the DLQ, schema push, the sweeper moving a hung
// handler's event, replay and discard), the projector (consumer groups dead-lettering and
// parking, positioning a group, the members of a partitioned group probing each other), a
// producer (publishing with the schema registry's validation). The e2e smoke runs the
// processes themselves with these users.
func TestNATSUsersRunJetbus(t *testing.T) {
	s, log := startNATSNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg, err := config.Load(config.Options{File: deployConfig})
	require.NoError(t, err)
	for i := range cfg.Topics {
		cfg.Topics[i].Replicas = 1 // one node
	}
	cfg.DLQ.Replicas = 1
	cfg.NATS.URLs = []string{s.ClientURL()}
	as := func(user string) *config.Config {
		c := *cfg
		c.NATS.User, c.NATS.Password, c.NATS.InboxPrefix = user, natsPassword(user), natsInboxPrefixes[user]
		return &c
	}

	// The bridge: topics, the DLQ, the schemas; the sweeper runs.
	bridge, err := wiring.Open(ctx, as(userBridge), "bridge", wiring.Needs{Schemas: true, DLQ: true}, embeddedtest.Logger(t))
	require.NoError(t, err)
	defer bridge.Close()
	require.NoError(t, bridge.EnsureTopics(ctx))
	_, err = schema.PushDir(ctx, bridge.Schemas, deploySchemas)
	require.NoError(t, err)
	sctx, stopSweeper := context.WithCancel(ctx)
	swept := make(chan error, 1)
	go func() { swept <- bridge.DLQ.RunSweeper(sctx, 50*time.Millisecond) }()
	defer func() { stopSweeper(); <-swept }()

	// The projector: the DLQ as its process opens it (parking on), two groups on orders.
	projector := connectAs(t, s, userProjector)
	pbare, err := jbjs.Open(ctx, projector.Conn)
	require.NoError(t, err)
	defer pbare.Close()
	q, err := dlq.Open(ctx, pbare.JetStream(), dlq.Config{Parking: true, Replicas: 1, Attach: true})
	require.NoError(t, err)
	defer q.Close()
	pbus, err := jbjs.Open(ctx, projector.Conn, jbjs.WithHandlerMiddleware(q.Middleware()))
	require.NoError(t, err)
	defer pbus.Close()
	var mu sync.Mutex
	broken := true
	handled := map[string]int{}
	ledger, err := pbus.Subscribe(ctx, "orders", "ledger", func(_ context.Context, d *jetbus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if broken && d.Key == "a" {
			return jetbus.Permanent(errors.New("ledger rejects a"))
		}
		handled[d.Key]++
		return nil
	}, jetbus.FromEarliest(), jetbus.Backoff(jetbus.ExponentialBackoff(5*time.Millisecond, 20*time.Millisecond)))
	require.NoError(t, err)
	defer ledger.Stop()
	release := make(chan struct{})
	hang, err := pbus.Subscribe(ctx, "orders", "hang", func(_ context.Context, d *jetbus.Delivery) error {
		if d.Key == "h" {
			<-release
		}
		return nil
	}, jetbus.FromEarliest(), jetbus.MaxAttempts(2), jetbus.AckTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer func() { close(release); _ = hang.Stop() }()

	// A producer: valid orders, validated against the registry before they are published.
	producer := connectAs(t, s, userProducer)
	pjs, err := natsjs.New(producer.Conn)
	require.NoError(t, err)
	reg, err := schema.Open(ctx, pjs)
	require.NoError(t, err)
	defer reg.Close()
	prod, err := jbjs.Open(ctx, producer.Conn, jbjs.WithPublishMiddleware(reg.PublishMiddleware()))
	require.NoError(t, err)
	defer prod.Close()
	order := func(key string, v int) map[string]any {
		return map[string]any{"id": key, "version": v, "customer": "c", "status": "placed", "total": 1, "created": "2026-01-01T00:00:00Z"}
	}
	_, err = prod.Publish(ctx, "orders", map[string]any{"id": "x"}, jetbus.WithKey("x"))
	require.ErrorIs(t, err, schema.ErrInvalid, "the producer validates")
	var first *jetbus.Event
	for i, key := range []string{"a", "b", "a", "h", "b"} {
		ev, err := prod.Publish(ctx, "orders", order(key, i+1), jetbus.WithKey(key))
		require.NoError(t, err, "producer: publish %s", key)
		if first == nil {
			first = ev
		}
	}
	count := func(f dlq.Filter) int {
		n, err := bridge.DLQ.Count(ctx, f)
		require.NoError(t, err)
		return n
	}
	require.Eventually(t, func() bool {
		return count(dlq.Filter{Group: "ledger"}) == 2 && count(dlq.Filter{Reason: dlq.ReasonMaxDeliveries}) == 1
	}, 30*time.Second, 20*time.Millisecond, "a dead-lettered and parked by the projector, h moved by the bridge's sweeper")
	parked, err := q.ParkedKeys(ctx, "ledger", "orders")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, parked)

	// The bridge replays the ledger's letters (a's events come back, a is unparked) and
	// discards the hung one.
	mu.Lock()
	broken = false
	mu.Unlock()
	rep, err := bridge.DLQ.Replay(ctx, bridge.Publisher, dlq.ReplayOptions{Filter: dlq.Filter{Group: "ledger"}})
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Replayed, "failed: %v", rep.Failed)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return handled["a"] == 2 && handled["b"] == 2 }, 30*time.Second, 20*time.Millisecond)
	n, err := bridge.DLQ.Discard(ctx, dlq.Filter{Reason: dlq.ReasonMaxDeliveries}, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	// The projector positions a new group after an event (a consumer created paused, reset,
	// resumed), as a projection starting from a position does.
	require.NoError(t, pbus.SetCursor(ctx, "orders", "late", jetbus.AfterEvent(first.ID)))
	cur, err := pbus.Cursor(ctx, "orders", "late")
	require.NoError(t, err)
	assert.Equal(t, uint64(6), cur.Lag(), "after the first event: the four others and the two replays")

	// Two members of a projection's group, each on a connection of its own as a replica has:
	// both answer liveness probes (a probe of their own at start), and when one's connection
	// is gone the other finds out from the server and removes it well before its TTL.
	members := map[string]*conn{}
	for _, id := range []string{"r1", "r2"} {
		c := connectAs(t, s, userProjector)
		b, err := jbjs.Open(ctx, c.Conn)
		require.NoError(t, err)
		defer b.Close()
		sub, err := partition.Subscribe(ctx, b, b.JetStream(), partition.Config{
			Topic: "orders", Group: "orders-view", MemberID: id, Fenced: true, Logger: embeddedtest.Logger(t),
		}, func(context.Context, *jetbus.Delivery) error { return nil })
		require.NoError(t, err)
		defer func() { _ = sub.Stop() }()
		members[id] = c
	}
	groupStatus := func() *partition.GroupStatus {
		st, err := partition.Status(ctx, pbare.JetStream(), "orders", "orders-view")
		require.NoError(t, err)
		return st
	}
	require.Eventually(t, func() bool { return len(groupStatus().Members) == 2 }, 30*time.Second, 20*time.Millisecond)
	for _, m := range groupStatus().Members {
		assert.Equal(t, partition.LiveSubject("orders-view", m.ID), m.Live, "%s answers liveness probes", m.ID)
	}
	members["r1"].Close()
	gone := time.Now()
	// r1's key would expire on its own no sooner than its TTL after its last heartbeat, 4.5 s
	// after the close at the earliest.
	require.Eventually(t, func() bool { return len(groupStatus().Members) == 1 }, 3500*time.Millisecond, 20*time.Millisecond,
		"r2 removes r1 once the server reports it gone, before its TTL")
	t.Logf("r1 removed %s after its connection closed", time.Since(gone).Round(time.Millisecond))

	// The bridge's status tool reads all of it.
	_, err = bridge.Status(ctx)
	require.NoError(t, err)

	assert.Empty(t, log.all(), "the server refused a process something its process does")
}
