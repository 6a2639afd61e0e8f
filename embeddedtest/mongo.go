package embeddedtest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// MongoURIEnv names the environment variable that points the MongoDB helpers at a real
// replica set instead of the in-process test backend.
const MongoURIEnv = "JETBUS_TEST_MONGO_URI"

var (
	mongoMu      sync.Mutex
	mongoServers = map[testing.TB]*minimongo.Server{}
	mongoSeq     atomic.Int64
)

// MongoURI returns the connection string of the MongoDB deployment t runs against: the
// value of JETBUS_TEST_MONGO_URI when set, otherwise an in-process minimongo server
// started for t (the same one for every call within t) and closed when t ends.
func MongoURI(t testing.TB) string {
	t.Helper()
	if uri := os.Getenv(MongoURIEnv); uri != "" {
		return uri
	}
	mongoMu.Lock()
	defer mongoMu.Unlock()
	if s, ok := mongoServers[t]; ok {
		return s.URI()
	}
	s, err := minimongo.Start(minimongo.Options{})
	if err != nil {
		t.Fatalf("start MongoDB test backend: %v", err)
	}
	mongoServers[t] = s
	t.Cleanup(func() {
		mongoMu.Lock()
		delete(mongoServers, t)
		mongoMu.Unlock()
		if err := s.Close(); err != nil {
			t.Errorf("close MongoDB test backend: %v", err)
		}
	})
	return s.URI()
}

var unsafeDBChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// Mongo returns an empty database unique to t on the deployment of MongoURI, with a client
// that is disconnected when t ends. Against a real MongoDB the database is dropped at the
// end of the test. The client's application name is the database's name, so a fault
// injected with MongoFault.AppName = db.Name() touches only this test's client, even on a
// deployment other tests share.
func Mongo(t testing.TB) *mongo.Database {
	t.Helper()
	uri := MongoURI(t)
	name := unsafeDBChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = strings.Trim(fmt.Sprintf("t%d_%s", mongoSeq.Add(1), name), "_")
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName(name))
	if err != nil {
		t.Fatalf("connect to MongoDB: %v", err)
	}
	db := client.Database(name)
	real := os.Getenv(MongoURIEnv) != ""
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if real {
			if err := db.Drop(ctx); err != nil {
				t.Errorf("drop test database %s: %v", name, err)
			}
		}
		_ = client.Disconnect(ctx)
	})
	return db
}
