package embeddedtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// MongoFailPoint names a MongoDB fail point other than failCommand (which MongoFault
// configures) that the test backend implements as MongoDB 7.0 does.
const (
	// FailGetMoreAfterCursorCheckout fails a getMore after it checked out its cursor,
	// destroying the cursor, as a network error or a step-down does while a change stream
	// waits. The server labels a change stream's resumable codes
	// ResumableChangeStreamError, so drivers resume.
	FailGetMoreAfterCursorCheckout = "failGetMoreAfterCursorCheckout"
	// OnPrimaryTransactionalWrite fires in a retryable write where MongoDB records it.
	// It is deployment-wide: it has no appName filter.
	OnPrimaryTransactionalWrite = "onPrimaryTransactionalWrite"
)

// FailMongoGetMores fails the next n getMores of clients connected with appName (every
// client when appName is empty) with code, after each checked out its cursor. The fail
// point is turned off when t ends.
func FailMongoGetMores(t testing.TB, client *mongo.Client, n, code int, appName string) {
	t.Helper()
	data := bson.D{{Key: "errorCode", Value: code}}
	if appName != "" {
		data = append(data, bson.E{Key: "appName", Value: appName})
	}
	configureFailPoint(t, client, FailGetMoreAfterCursorCheckout, n, data)
}

// LoseMongoWriteReplies applies the next n retryable writes of the deployment and closes
// their connections before they reply (onPrimaryTransactionalWrite without an exception
// code): the driver retries each, and the server answers the retry from its record of
// the write. The fail point is turned off when t ends.
func LoseMongoWriteReplies(t testing.TB, client *mongo.Client, n int) {
	t.Helper()
	configureFailPoint(t, client, OnPrimaryTransactionalWrite, n, bson.D{})
}

// MongoFailPointActivations turns the named fail point off and returns how often it has
// fired in the deployment's lifetime (configureFailPoint's count).
func MongoFailPointActivations(t testing.TB, client *mongo.Client, name string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct {
		Count int64 `bson:"count"`
	}
	off := bson.D{{Key: "configureFailPoint", Value: name}, {Key: "mode", Value: "off"}}
	if err := client.Database("admin").RunCommand(ctx, off).Decode(&res); err != nil {
		t.Fatalf("read %s activations: %v", name, err)
	}
	return res.Count
}

func configureFailPoint(t testing.TB, client *mongo.Client, name string, n int, data bson.D) {
	t.Helper()
	if n <= 0 {
		t.Fatalf("configure %s: n must be positive", name)
	}
	cmd := bson.D{{Key: "configureFailPoint", Value: name}, {Key: "mode", Value: bson.D{{Key: "times", Value: n}}}, {Key: "data", Value: data}}
	admin := client.Database("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.RunCommand(ctx, cmd).Err(); err != nil {
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 59 {
			t.Fatalf("configure %s: the deployment has no configureFailPoint; start it with --setParameter enableTestCommands=1", name)
		}
		t.Fatalf("configure %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		off := bson.D{{Key: "configureFailPoint", Value: name}, {Key: "mode", Value: "off"}}
		if err := admin.RunCommand(ctx, off).Err(); err != nil && !errors.Is(err, mongo.ErrClientDisconnected) {
			t.Errorf("turn %s off: %v", name, err)
		}
	})
}
