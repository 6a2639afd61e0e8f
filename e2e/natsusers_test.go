package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/jetstream"
)

// authConf holds the NATS users and permissions deploy/ ships; the stack's cluster requires
// them, and every process and client of a test logs in as the user it would be deployed as.
const authConf = "../deploy/nats/auth.conf"

// The users of authConf, and the inbox prefix each connects with (nats.inbox_prefix): the
// trusted ones get replies on a prefix of their own, which the client user may not subscribe
// to.
const (
	userBridge    = "bridge"    // the bridge processes
	userProjector = "projector" // the projectors and the counters (a Go projection of your own)
	userProducer  = "producer"  // the Go client: a Bus publishing straight to JetStream
	userClient    = "client"    // the ingress clients (Node, or nats.go)
	userAdmin     = "admin"     // the test's own reads and faults (the nats CLI's user)
)

var inboxPrefixes = map[string]string{userBridge: "_INBOX_bridge", userProjector: "_INBOX_projector", userProducer: "_INBOX_producer"}

// users are authConf's users, each with a password of this test binary (authConf names them
// $NATS_<USER>_PASSWORD, which the servers read from the environment).
var users struct {
	once      sync.Once
	list      []*server.User
	passwords map[string]string
	err       error
}

func natsUsers(t *testing.T) ([]*server.User, map[string]string) {
	t.Helper()
	users.once.Do(func() {
		users.passwords = map[string]string{}
		for _, u := range []string{userBridge, userProjector, userProducer, userClient, userAdmin} {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			users.passwords[u] = "pw-" + hex.EncodeToString(b)
			if users.err = os.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", users.passwords[u]); users.err != nil {
				return
			}
		}
		var o *server.Options
		if o, users.err = server.ProcessConfigFile(authConf); users.err == nil {
			users.list = o.Users
		}
	})
	require.NoError(t, users.err, "load %s", authConf)
	require.NotEmpty(t, users.list, "%s has no users", authConf)
	return users.list, users.passwords
}

// violations collects the permission violations the servers log; a scenario ends with none.
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

// natsCluster starts the stack's three NATS nodes with authConf's users, logging violations.
func (s *stack) natsCluster() {
	list, pw := natsUsers(s.t)
	s.passwords = pw
	s.nats = embeddedtest.Cluster(s.t, 3, embeddedtest.WithUsers(list...), embeddedtest.WithLogger(&s.violations, false))
}

// connect connects to the cluster as user, with its inbox prefix; closed when the test ends.
func (s *stack) connect(t *testing.T, user string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.UserInfo(user, s.passwords[user])}, opts...)
	if p := inboxPrefixes[user]; p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return embeddedtest.Connect(t, s.nats.URLs(), opts...)
}

// bus opens a Bus on its own connection as user (see embeddedtest.Bus).
func (s *stack) bus(t *testing.T, user string) *jetstream.Bus {
	t.Helper()
	b, err := jetstream.Open(t.Context(), s.connect(t, user), jetstream.WithLogger(embeddedtest.Logger(t)))
	require.NoError(t, err, "open a Bus as %s", user)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// procEnv is the environment a bridge or projector process logs in with (docs/config.md).
func (s *stack) procEnv(user string) []string {
	return append(os.Environ(), "JETBUS_NATS_USER="+user, "JETBUS_NATS_PASSWORD="+s.passwords[user],
		"JETBUS_NATS_INBOX_PREFIX="+inboxPrefixes[user])
}

// urlsAs is the cluster's URLs with user's login in each (for programs that take a URL only).
func (s *stack) urlsAs(user string) string {
	urls := strings.Split(s.nats.URLs(), ",")
	for i, u := range urls {
		p, err := url.Parse(u)
		if err != nil {
			continue
		}
		p.User = url.UserPassword(user, s.passwords[user])
		urls[i] = p.String()
	}
	return strings.Join(urls, ",")
}

// checkNoViolations: no process or client of the scenario was refused anything by NATS: the
// shipped permissions are all they need.
func (s *stack) checkNoViolations(t *testing.T) {
	t.Helper()
	v := s.violations.all()
	if len(v) > 10 {
		v = append(v[:10], fmt.Sprintf("… %d more", len(v)-10))
	}
	require.Empty(t, v, "NATS permission violations (%s)", authConf)
}
