package embeddedtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// MongoFault describes a fault injected into MongoDB commands with MongoDB's own
// failCommand fail point, so the same test runs against the test backend and against a
// real deployment started with --setParameter enableTestCommands=1.
//
// The fail point is one per deployment: a fault affects every client of it unless AppName
// names the application of the client under test (options.Client().SetAppName), and a
// later fault replaces an earlier one. Tests sharing a real deployment should scope their
// faults with AppName.
type MongoFault struct {
	// Commands names the commands affected, as the server knows them: "insert", "update",
	// "delete", "findAndModify", "find", "aggregate", "getMore", "commitTransaction", ...
	// Required.
	Commands []string
	// Times limits the fault to the next Times affected commands; zero affects every one
	// until the test ends.
	Times int
	// Skip lets this many affected commands through before the fault applies to every
	// following one. Skip and Times exclude each other.
	Skip int
	// Code fails each affected command with this error code before it runs, for example
	// 91 (ShutdownInProgress) or 11600 (InterruptedAtShutdown), which the server labels
	// RetryableWriteError for a retryable write, or 112 (WriteConflict), which it labels
	// TransientTransactionError in a transaction.
	Code int
	// Labels replaces the error labels the server attaches; nil keeps the server's own,
	// an empty slice removes them.
	Labels []string
	// CloseConnection closes the connection instead of answering; the command does not run.
	CloseConnection bool
	// Block holds each affected command this long before it runs (or fails with Code).
	Block time.Duration
	// WriteConcernError is added to the reply of each affected write after it applied,
	// as a write concern that could not be satisfied is reported.
	WriteConcernError *MongoWriteConcernError
	// AppName limits the fault to clients connected with this application name.
	AppName string
}

// MongoWriteConcernError is the writeConcernError a MongoFault adds to a write's reply.
type MongoWriteConcernError struct {
	Code    int
	Message string
}

// InjectMongoFault configures f on the deployment client is connected to and turns the
// fault off when t ends. It fails t when the deployment has no failCommand fail point.
func InjectMongoFault(t testing.TB, client *mongo.Client, f MongoFault) {
	t.Helper()
	cmd, err := f.command()
	if err != nil {
		t.Fatalf("inject MongoDB fault: %v", err)
	}
	admin := client.Database("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.RunCommand(ctx, cmd).Err(); err != nil {
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 59 {
			t.Fatalf("inject MongoDB fault: the deployment has no configureFailPoint; start it with --setParameter enableTestCommands=1")
		}
		t.Fatalf("inject MongoDB fault: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		off := bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}
		if err := admin.RunCommand(ctx, off).Err(); err != nil && !errors.Is(err, mongo.ErrClientDisconnected) {
			t.Errorf("turn MongoDB fault off: %v", err)
		}
	})
}

// FailMongoCommands fails the next n of the named commands with the error code.
func FailMongoCommands(t testing.TB, client *mongo.Client, n, code int, commands ...string) {
	t.Helper()
	InjectMongoFault(t, client, MongoFault{Commands: commands, Times: n, Code: code})
}

// DropMongoConnections closes the connection of the next n of the named commands
// instead of running them.
func DropMongoConnections(t testing.TB, client *mongo.Client, n int, commands ...string) {
	t.Helper()
	InjectMongoFault(t, client, MongoFault{Commands: commands, Times: n, CloseConnection: true})
}

// BlockMongoCommands holds the next n of the named commands for d before they run.
func BlockMongoCommands(t testing.TB, client *mongo.Client, d time.Duration, n int, commands ...string) {
	t.Helper()
	InjectMongoFault(t, client, MongoFault{Commands: commands, Times: n, Block: d})
}

// command renders f as a configureFailPoint command.
func (f MongoFault) command() (bson.D, error) {
	if len(f.Commands) == 0 {
		return nil, errors.New("no commands named")
	}
	if f.Times < 0 || f.Skip < 0 {
		return nil, errors.New("Times and Skip must not be negative")
	}
	if f.Times > 0 && f.Skip > 0 {
		return nil, errors.New("Times and Skip exclude each other")
	}
	if f.Code == 0 && !f.CloseConnection && f.Block <= 0 && f.WriteConcernError == nil {
		return nil, errors.New("the fault does nothing: set Code, CloseConnection, Block or WriteConcernError")
	}
	var mode any = "alwaysOn"
	switch {
	case f.Times > 0:
		mode = bson.D{{Key: "times", Value: f.Times}}
	case f.Skip > 0:
		mode = bson.D{{Key: "skip", Value: f.Skip}}
	}
	cmds := make(bson.A, len(f.Commands))
	for i, c := range f.Commands {
		cmds[i] = c
	}
	data := bson.D{{Key: "failCommands", Value: cmds}}
	if f.Code != 0 {
		data = append(data, bson.E{Key: "errorCode", Value: f.Code})
	}
	if f.Labels != nil {
		labels := make(bson.A, len(f.Labels))
		for i, l := range f.Labels {
			labels[i] = l
		}
		data = append(data, bson.E{Key: "errorLabels", Value: labels})
	}
	if f.CloseConnection {
		data = append(data, bson.E{Key: "closeConnection", Value: true})
	}
	if f.Block > 0 {
		data = append(data, bson.E{Key: "blockConnection", Value: true}, bson.E{Key: "blockTimeMS", Value: f.Block.Milliseconds()})
	}
	if w := f.WriteConcernError; w != nil {
		data = append(data, bson.E{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: w.Code}, {Key: "errmsg", Value: w.Message}}})
	}
	if f.AppName != "" {
		data = append(data, bson.E{Key: "appName", Value: f.AppName})
	}
	return bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: mode}, {Key: "data", Value: data}}, nil
}
