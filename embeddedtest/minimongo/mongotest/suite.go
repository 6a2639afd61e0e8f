// Package mongotest is a conformance suite for MongoDB deployments as jetbus's tests use
// them. It drives a deployment exclusively through the official Go driver, and its
// assertions hold for a real MongoDB 7/8 replica set as well as for the in-process
// minimongo backend, so running it against both shows the backend behaves like MongoDB.
package mongotest

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Env is the deployment one test runs against.
type Env struct {
	// DB is an empty database private to the test.
	DB *mongo.Database
	// URI connects new clients to the same deployment.
	URI string
}

// Run runs the conformance suite. setup is called once per subtest and must return a fresh
// database; it registers its own cleanup on the test it is given.
func Run(t *testing.T, setup func(t *testing.T) Env) {
	groups := []struct {
		name  string
		tests map[string]func(t *testing.T, env Env)
	}{
		{"Admin", adminTests},
		{"CRUD", crudTests},
		{"Query", queryTests},
		{"Update", updateTests},
		{"Aggregate", aggregateTests},
		{"Index", indexTests},
		{"Txn", txnTests},
		{"ChangeStream", changeStreamTests},
		{"Errors", errorTests},
		{"Extras", extraTests},
		{"FailPoint", failPointTests},
		{"Faults", faultTests},
		{"PipelineUpdate", pipelineUpdateTests},
		{"DDL", ddlTests},
		{"Fidelity", fidelityTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, name := range sortedKeys(g.tests) {
				fn := g.tests[name]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					fn(t, setup(t))
				})
			}
		})
	}
}

func sortedKeys(m map[string]func(t *testing.T, env Env)) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j-1] > keys[j]; j-- {
			keys[j-1], keys[j] = keys[j], keys[j-1]
		}
	}
	return keys
}

// D builds a bson.D from alternating keys and values.
func D(kv ...any) bson.D {
	if len(kv)%2 != 0 {
		panic("mongotest.D: odd number of arguments")
	}
	d := make(bson.D, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}

// A builds a bson.A.
func A(v ...any) bson.A {
	if v == nil {
		return bson.A{}
	}
	return bson.A(v)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient connects an additional client to the deployment.
func newClient(t *testing.T, env Env, opts ...*options.ClientOptions) *mongo.Client {
	o := options.Client().ApplyURI(env.URI)
	for _, x := range opts {
		if x.Dialer != nil {
			o.SetDialer(x.Dialer)
		}
		if x.RetryWrites != nil {
			o.SetRetryWrites(*x.RetryWrites)
		}
	}
	c, err := mongo.Connect(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// ejson renders v as relaxed extended JSON for comparisons.
func ejson(t *testing.T, v any) string {
	t.Helper()
	if docs, ok := v.([]bson.D); ok {
		parts := make([]string, len(docs))
		for i, d := range docs {
			parts[i] = ejson(t, d)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	b, err := bson.MarshalExtJSON(v, false, false)
	require.NoError(t, err)
	return string(b)
}

func requireJSON(t *testing.T, want string, got any) {
	t.Helper()
	require.Equal(t, want, ejson(t, got)) // exact: field order matters
}

// requireCode asserts err is a server error with code.
func requireCode(t *testing.T, err error, code int) {
	t.Helper()
	require.Error(t, err)
	var se mongo.ServerError
	require.True(t, errors.As(err, &se), "not a server error: %v", err)
	require.True(t, se.HasErrorCode(code), "want code %d, got %v", code, err)
}

func commandError(t *testing.T, err error) mongo.CommandError {
	t.Helper()
	var ce mongo.CommandError
	require.True(t, errors.As(err, &ce), "not a command error: %T %v", err, err)
	return ce
}

func findAll(t *testing.T, coll *mongo.Collection, filter any, opts ...options.Lister[options.FindOptions]) []bson.D {
	t.Helper()
	ctx := ctxFor(t)
	cur, err := coll.Find(ctx, filter, opts...)
	require.NoError(t, err)
	var out []bson.D
	require.NoError(t, cur.All(ctx, &out))
	return out
}

func ids(docs []bson.D) []any {
	out := make([]any, 0, len(docs))
	for _, d := range docs {
		for _, e := range d {
			if e.Key == "_id" {
				out = append(out, e.Value)
			}
		}
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", within, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replyDropper is a dialer whose connections swallow the server's reply to the first
// command whose body starts with a given command name, then fail as if the network broke.
// The server has executed the command, so the driver's retry must not apply it twice.
type replyDropper struct {
	mu      sync.Mutex
	command string
	dropped int
}

func (d *replyDropper) arm(command string) {
	d.mu.Lock()
	d.command = command
	d.mu.Unlock()
}

func (d *replyDropper) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

func (d *replyDropper) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

type dropConn struct {
	net.Conn
	d       *replyDropper
	swallow bool
}

func (c *dropConn) Write(b []byte) (int, error) {
	c.d.mu.Lock()
	if c.d.command != "" && opMsgCommand(b) == c.d.command {
		c.d.command = ""
		c.d.dropped++
		c.swallow = true
	}
	c.d.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if c.swallow {
		c.swallow = false
		var hdr [4]byte
		if _, err := io.ReadFull(c.Conn, hdr[:]); err == nil {
			n := int64(binary.LittleEndian.Uint32(hdr[:])) - 4
			_, _ = io.CopyN(io.Discard, c.Conn, n)
		}
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by test")}
	}
	return c.Conn.Read(p)
}

// opMsgCommand returns the command name of an OP_MSG wire message.
func opMsgCommand(b []byte) string {
	if len(b) < 16+4+1+4+2 || binary.LittleEndian.Uint32(b[12:]) != 2013 || b[20] != 0 {
		return ""
	}
	body := b[21+4:]
	if len(body) < 2 {
		return ""
	}
	name := body[1:]
	if i := strings.IndexByte(string(name), 0); i >= 0 {
		return string(name[:i])
	}
	return ""
}
