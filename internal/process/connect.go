package process

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/internal/config"
)

// NATSOptions returns the connection options of c: credentials, NKey, user and password or
// token, TLS and the inbox prefix, named name (as nats server's connz shows it).
func NATSOptions(c config.NATS, name string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name)}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	switch {
	case c.Creds != "":
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey: %w", err)
		}
		opts = append(opts, o)
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CA))
	}
	if c.TLS.Cert != "" {
		opts = append(opts, nats.ClientCert(c.TLS.Cert, c.TLS.Key))
	}
	return opts, nil
}

// A process's reconnect: after it has tried every server of its list it waits ReconnectWait,
// plus up to the jitter, before trying again. Short, because a partitioned group's members
// advertise it (partition.MemberInfo.Reconnect) and the others take a member whose
// connection stays gone longer than that (plus a margin) for crashed: the shorter it is,
// the sooner a crashed projector's partitions resume (about 1 s after its last heartbeat).
// A client of a cluster reconnects to another node at once anyway; against one server down,
// a process tries about three times a second, which costs nothing worth a longer wait.
const (
	reconnectWait      = 250 * time.Millisecond
	reconnectJitter    = 100 * time.Millisecond
	reconnectJitterTLS = 250 * time.Millisecond
)

// ConnectNATS connects to c's servers. A command-line tool (keep false) fails at once when no
// server answers; a process (keep true) returns at once and keeps connecting, and reconnecting,
// in the background until closed, so it can report "not ready" meanwhile instead of exiting.
func ConnectNATS(c config.NATS, name string, keep bool) (*nats.Conn, error) {
	opts, err := NATSOptions(c, name)
	if err != nil {
		return nil, err
	}
	if keep {
		opts = append(opts, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
			nats.ReconnectWait(reconnectWait), nats.ReconnectJitter(reconnectJitter, reconnectJitterTLS))
	}
	url := strings.Join(c.URLs, ",")
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", url, err)
	}
	return nc, nil
}

// ConnectMongo returns a client of c.URI. The driver connects lazily: Ping tells whether the
// deployment answers.
func ConnectMongo(c config.Mongo, name string) (*mongo.Client, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(c.URI).SetAppName(name))
	if err != nil {
		return nil, fmt.Errorf("mongo.uri: %w", err)
	}
	return client, nil
}
