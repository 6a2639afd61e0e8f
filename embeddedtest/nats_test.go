package embeddedtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
)

func TestNATSJetStream(t *testing.T) {
	s := embeddedtest.NATS(t)
	nc := embeddedtest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "t.a", []byte("x"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence)
}

func TestClusterStopRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	c := embeddedtest.Cluster(t, 3)
	nc := embeddedtest.Connect(t, c.URLs())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = js.CreateStream(cctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "create R3 stream: %v", err)

	// Stop a node that does not lead the stream; publishes keep being acknowledged.
	var victim int
	require.Eventually(t, func() bool { return c.StreamLeader("$G", "T") >= 0 }, 10*time.Second, 20*time.Millisecond)
	victim = (c.StreamLeader("$G", "T") + 1) % 3
	c.Stop(victim)
	for i := range 10 {
		// A publish may time out while the cluster notices the stopped node; retrying with
		// the same message ID stores it once.
		require.Eventually(t, func() bool {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := js.Publish(pctx, "t.a", []byte{byte(i)}, jetstream.WithMsgID(string(rune('a'+i))))
			return err == nil
		}, 30*time.Second, 100*time.Millisecond)
	}
	c.Restart(victim)
	require.Eventually(t, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := js.Stream(ictx, "T")
		if err != nil {
			return false
		}
		i, err := info.Info(ictx)
		return err == nil && i.State.Msgs == 10 && i.Cluster != nil && len(i.Cluster.Replicas) == 2 && i.Cluster.Replicas[0].Current && i.Cluster.Replicas[1].Current
	}, 20*time.Second, 50*time.Millisecond)
}

// violations records the error lines of a server log that are permission violations.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}
func (v *violations) Errorf(format string, args ...any) {
	if line := fmt.Sprintf(format, args...); strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// TestClusterWithUsers: a cluster whose nodes require users keeps JetStream working (R3
// streams, across a node restart) for a user allowed its API, refuses a user what its
// permissions do not allow, and logs the violation.
func TestClusterWithUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	users := []*server.User{
		{Username: "admin", Password: "admin-secret"},
		{Username: "client", Password: "client-secret", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"in.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}},
	}
	log := &violations{}
	c := embeddedtest.Cluster(t, 3, embeddedtest.WithUsers(users...), embeddedtest.WithLogger(log, false))

	_, err := nats.Connect(c.URLs(), nats.NoReconnect())
	require.Error(t, err, "a connection without a user is refused")
	admin := embeddedtest.Connect(t, c.URLs(), nats.UserInfo("admin", "admin-secret"))
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = js.CreateStream(cctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "create R3 stream: %v", err)

	errs := make(chan error, 1)
	client := embeddedtest.Connect(t, c.URLs(), nats.UserInfo("client", "client-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	require.NoError(t, client.Publish("t.a", []byte("x")))
	require.NoError(t, client.Flush())
	select {
	case err := <-errs:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.ErrorContains(t, err, `Permissions Violation for Publish to "t.a"`)
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not refuse the client's publish to t.a")
	}
	require.Eventually(t, func() bool { return len(log.all()) > 0 }, 5*time.Second, 10*time.Millisecond)
	require.Contains(t, log.all()[0], `Publish Violation - Subject "t.a"`)

	// A restarted node requires the same users and logs to the same place.
	c.Stop(0)
	c.Restart(0)
	s := c.Servers()[0]
	_, err = nats.Connect(s.ClientURL(), nats.NoReconnect())
	require.Error(t, err, "the restarted node refuses a connection without a user")
	one := embeddedtest.Connect(t, s.ClientURL(), nats.UserInfo("admin", "admin-secret"), nats.DontRandomize())
	js1, err := jetstream.New(one)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js1.Publish(ictx, "t.a", []byte("y"), jetstream.WithMsgID("y"))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "publish through the restarted node")
	before := len(log.all())
	bad := embeddedtest.Connect(t, s.ClientURL(), nats.UserInfo("client", "client-secret"), nats.DontRandomize(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	_, err = bad.SubscribeSync("t.>")
	require.NoError(t, err)
	require.NoError(t, bad.Flush())
	require.Eventually(t, func() bool { return len(log.all()) > before }, 5*time.Second, 10*time.Millisecond,
		"the restarted node logs the violation")
	require.Contains(t, log.all()[before], `Subscription Violation - Subject "t.>"`)
}
