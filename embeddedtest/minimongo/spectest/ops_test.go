package spectest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// args reads an operation's arguments and refuses those it was not asked for.
type args struct {
	d    bson.D
	used map[string]bool
}

func (a *args) get(k string) (any, bool) {
	a.used[k] = true
	return lookup(a.d, k)
}

func (a *args) str(k string) string {
	v, _ := a.get(k)
	s, _ := v.(string)
	return s
}

func (a *args) int64(k string) (int64, bool) {
	v, ok := a.get(k)
	if !ok {
		return 0, false
	}
	n, isNum := number(v)
	return int64(n), isNum
}

func (a *args) bool(k string) (bool, bool) {
	v, ok := a.get(k)
	b, _ := v.(bool)
	return b, ok
}

func (a *args) unused() error {
	for _, e := range a.d {
		if !a.used[e.Key] {
			return fmt.Errorf("unsupported argument %s", e.Key)
		}
	}
	return nil
}

func (r *run) operation(ctx context.Context, op bson.D) error {
	a := &args{d: doc(op, "arguments"), used: map[string]bool{}}
	obj, name := str(op, "object"), str(op, "name")
	var res any
	var err error
	if obj == "testRunner" {
		res, err = r.special(ctx, name, a)
	} else {
		res, err = r.entityOp(ctx, obj, name, a)
	}
	var unsupported *unsupportedErr
	if errors.As(err, &unsupported) {
		return err
	}
	if ignore, _ := lookup(op, "ignoreResultAndError"); ignore == true {
		return nil
	}
	if ee := doc(op, "expectError"); ee != nil {
		if err == nil {
			return fmt.Errorf("want an error, got result %s", show(normalize(res)))
		}
		return r.expectError(ee, err, res)
	}
	if err != nil {
		return fmt.Errorf("unexpected error: %w", err)
	}
	if exp, ok := lookup(op, "expectResult"); ok {
		act := normalize(res)
		if iterableOps[name] {
			// each document of an iterable result is a root-level document
			ea, eok := exp.(bson.A)
			aa, aok := act.(bson.A)
			if eok && aok && len(ea) == len(aa) {
				for i := range ea {
					if err := r.m.match(ea[i], aa[i], true, fmt.Sprintf("result[%d]", i)); err != nil {
						return err
					}
				}
				return r.save(op, res)
			}
		}
		if err := r.m.match(exp, act, true, "result"); err != nil {
			return err
		}
	}
	return r.save(op, res)
}

// iterableOps return an iterable of documents.
var iterableOps = map[string]bool{"find": true, "aggregate": true, "listCollections": true, "listDatabases": true,
	"listIndexes": true, "runCursorCommand": true, "listSearchIndexes": true}

func (r *run) save(op bson.D, res any) error {
	if id := str(op, "saveResultAsEntity"); id != "" {
		switch x := res.(type) {
		case *mongo.ChangeStream:
			r.en.streams[id] = x
		case *mongo.Cursor:
			r.en.cursors[id] = x
		default:
			r.en.values[id] = res
		}
	}
	return nil
}

// unsupportedErr is an operation or argument the runner does not implement.
type unsupportedErr struct{ what string }

func (u *unsupportedErr) Error() string { return "runner does not support " + u.what }

func unsupported(format string, a ...any) error {
	return &unsupportedErr{what: fmt.Sprintf(format, a...)}
}

func (r *run) expectError(ee bson.D, err error, res any) error {
	var se mongo.ServerError
	isServer := errors.As(err, &se)
	for _, e := range ee {
		switch e.Key {
		case "isError":
		case "isClientError":
			want, _ := e.Value.(bool)
			// network errors and timeouts are the client's, though the Go driver
			// reports them as command errors
			client := !isServer || mongo.IsNetworkError(err) || mongo.IsTimeout(err)
			if want != client {
				return fmt.Errorf("isClientError %v, got %T %v", want, err, err)
			}
		case "isTimeoutError":
			want, _ := e.Value.(bool)
			if want != mongo.IsTimeout(err) {
				return fmt.Errorf("isTimeoutError %v, got %v", want, err)
			}
		case "errorContains":
			s, _ := e.Value.(string)
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(s)) {
				return fmt.Errorf("error %q does not contain %q", err, s)
			}
		case "errorCode":
			n, _ := number(e.Value)
			if !isServer || !hasCode(err, int(n)) {
				return fmt.Errorf("want error code %d, got %v", int(n), err)
			}
		case "errorCodeName":
			s, _ := e.Value.(string)
			if !hasCodeName(err, s) {
				return fmt.Errorf("want error code name %s, got %v", s, err)
			}
		case "errorLabelsContain", "errorLabelsOmit":
			var le mongo.LabeledError
			labeled := errors.As(err, &le)
			for _, l := range e.Value.(bson.A) {
				has := labeled && le.HasErrorLabel(l.(string))
				if has != (e.Key == "errorLabelsContain") {
					return fmt.Errorf("%s %s: error %v", e.Key, l, err)
				}
			}
		case "errorResponse":
			var ce mongo.CommandError
			var raw bson.Raw
			var we mongo.WriteException
			switch {
			case errors.As(err, &ce):
				raw = ce.Raw
			case errors.As(err, &we):
				raw = we.Raw
			}
			if raw == nil {
				return fmt.Errorf("errorResponse: no server response in %v", err)
			}
			if merr := r.m.match(e.Value, normalize(raw), true, "errorResponse"); merr != nil {
				return merr
			}
		case "expectResult":
			// the partial result the driver returned with the error, if any
			act := any(missing)
			if res != nil {
				act = normalize(res)
			}
			if merr := r.m.match(e.Value, act, true, "result"); merr != nil {
				return merr
			}
		case "writeErrors", "writeConcernErrors":
			return unsupported("expectError.%s", e.Key)
		default:
			return unsupported("expectError.%s", e.Key)
		}
	}
	return nil
}

func hasCode(err error, code int) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return int(ce.Code) == code
	}
	var we mongo.WriteException
	if errors.As(err, &we) {
		if we.WriteConcernError != nil && we.WriteConcernError.Code == code {
			return true
		}
		for _, w := range we.WriteErrors {
			if w.Code == code {
				return true
			}
		}
		return false
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		if bwe.WriteConcernError != nil && bwe.WriteConcernError.Code == code {
			return true
		}
		for _, w := range bwe.WriteErrors {
			if w.Code == code {
				return true
			}
		}
		return false
	}
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

func hasCodeName(err error, name string) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Name == name
	}
	var we mongo.WriteException
	if errors.As(err, &we) && we.WriteConcernError != nil {
		return we.WriteConcernError.Name == name
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError != nil {
		return bwe.WriteConcernError.Name == name
	}
	return false // write errors carry no code name
}

// ---- special operations ----

func (r *run) special(ctx context.Context, name string, a *args) (any, error) {
	switch name {
	case "failPoint", "targetedFailPoint":
		c := r.en.clients[a.str("client")]
		if c == nil {
			return nil, fmt.Errorf("no client %s", a.str("client"))
		}
		a.get("session")
		fp, _ := a.get("failPoint")
		if err := c.c.Database("admin").RunCommand(ctx, fp, options.RunCmd().SetReadPreference(readpref.Primary())).Err(); err != nil {
			return nil, fmt.Errorf("configureFailPoint: %w", err)
		}
		r.en.failOn = append(r.en.failOn, c.c)
		return nil, a.unused()
	case "assertSessionTransactionState":
		s := r.en.sessions[a.str("session")]
		want := a.str("state")
		got := "none"
		if s == nil {
			return nil, fmt.Errorf("no session %s", a.str("session"))
		}
		got = sessionState(s, want)
		if got != want {
			return nil, fmt.Errorf("session state: want %s, got %s", want, got)
		}
		return nil, nil
	case "assertSessionPinned":
		return nil, errors.New("the session is not pinned (a replica set pins no mongos)")
	case "assertSessionUnpinned":
		a.get("session")
		return nil, nil
	case "assertDifferentLsidOnLastTwoCommands", "assertSameLsidOnLastTwoCommands":
		c := r.en.clients[a.str("client")]
		if c == nil {
			return nil, fmt.Errorf("no client %s", a.str("client"))
		}
		c.mu.Lock()
		var cmds []bson.D
		for _, e := range c.events {
			if e.kind == "commandStartedEvent" {
				cmds = append(cmds, e.cmd)
			}
		}
		c.mu.Unlock()
		if len(cmds) < 2 {
			return nil, fmt.Errorf("%s: fewer than two commands observed", name)
		}
		l1, _ := lookup(cmds[len(cmds)-2], "lsid")
		l2, _ := lookup(cmds[len(cmds)-1], "lsid")
		same := equalExact(l1, l2)
		if same != (name == "assertSameLsidOnLastTwoCommands") {
			return nil, fmt.Errorf("%s: %s and %s", name, show(l1), show(l2))
		}
		return nil, nil
	case "assertSessionDirty", "assertSessionNotDirty":
		return nil, unsupported("%s (the Go driver does not expose a session's dirty flag)", name)
	case "assertCollectionExists", "assertCollectionNotExists":
		names, err := r.internal.Database(a.str("databaseName")).ListCollectionNames(ctx, bson.D{{Key: "name", Value: a.str("collectionName")}})
		if err != nil {
			return nil, err
		}
		if (len(names) == 1) != (name == "assertCollectionExists") {
			return nil, fmt.Errorf("%s %s.%s", name, a.str("databaseName"), a.str("collectionName"))
		}
		return nil, a.unused()
	case "assertIndexExists", "assertIndexNotExists":
		want := a.str("indexName")
		specs, err := r.internal.Database(a.str("databaseName")).Collection(a.str("collectionName")).Indexes().ListSpecifications(ctx)
		if err != nil && name == "assertIndexExists" {
			return nil, err
		}
		found := false
		for _, s := range specs {
			if s.Name == want {
				found = true
			}
		}
		if found != (name == "assertIndexExists") {
			return nil, fmt.Errorf("%s %s", name, a.str("indexName"))
		}
		return nil, a.unused()
	case "createEntities":
		v, _ := a.get("entities")
		return nil, r.en.create(v.(bson.A))
	case "wait":
		ms, _ := a.int64("ms")
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return nil, nil
	case "waitForEvent", "assertEventCount":
		c := r.en.clients[a.str("client")]
		if c == nil {
			return nil, fmt.Errorf("no client %s", a.str("client"))
		}
		ev, _ := a.get("event")
		evd := ev.(bson.D)
		n, _ := a.int64("count")
		count := func() int64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			var k int64
			for _, e := range c.events {
				if e.kind == evd[0].Key {
					k++
				}
			}
			return k
		}
		if name == "waitForEvent" {
			deadline := time.Now().Add(10 * time.Second)
			for count() < n {
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("waitForEvent %s: %d of %d", evd[0].Key, count(), n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			return nil, nil
		}
		if got := count(); got != n {
			return nil, fmt.Errorf("assertEventCount %s: want %d, got %d", evd[0].Key, n, got)
		}
		return nil, nil
	case "assertNumberConnectionsCheckedOut":
		return nil, unsupported("assertNumberConnectionsCheckedOut")
	}
	return nil, unsupported("testRunner operation %s", name)
}

// sessionState derives the transaction state the unified format names from what the Go
// driver exposes.
func sessionState(s *mongo.Session, want string) string {
	if s.TransactionRunning() {
		if want == "starting" || want == "in_progress" {
			return want // the driver does not tell the two apart
		}
		return "in_progress"
	}
	if want == "committed" || want == "aborted" || want == "none" {
		return want // not distinguishable either; a running transaction is caught above
	}
	return "none"
}

// ---- entity operations ----

func (r *run) sessCtx(ctx context.Context, a *args) (context.Context, error) {
	if v, ok := a.get("session"); ok {
		s := r.en.sessions[v.(string)]
		if s == nil {
			return nil, fmt.Errorf("no session %v", v)
		}
		ctx = mongo.NewSessionContext(ctx, s)
	}
	if ms, ok := a.int64("timeoutMS"); ok {
		c, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		_ = cancel // ends with the test's context
		ctx = c
	}
	return ctx, nil
}

func (r *run) entityOp(ctx context.Context, obj, name string, a *args) (any, error) {
	if c, ok := r.en.colls[obj]; ok {
		return r.collOp(ctx, c, name, a)
	}
	if d, ok := r.en.dbs[obj]; ok {
		return r.dbOp(ctx, d, name, a)
	}
	if c, ok := r.en.clients[obj]; ok {
		return r.clientOp(ctx, c.c, name, a)
	}
	if s, ok := r.en.sessions[obj]; ok {
		return r.sessionOp(ctx, s, name, a)
	}
	if cs, ok := r.en.streams[obj]; ok {
		return r.streamOp(ctx, cs, name, a)
	}
	if cur, ok := r.en.cursors[obj]; ok {
		return r.cursorOp(ctx, cur, name, a)
	}
	return nil, fmt.Errorf("no entity %s", obj)
}

func (r *run) streamOp(ctx context.Context, cs *mongo.ChangeStream, name string, a *args) (any, error) {
	switch name {
	case "iterateUntilDocumentOrError":
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if cs.Next(c) {
			return cs.Current, nil
		}
		if err := cs.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("change stream ended")
	case "iterateOnce":
		cs.TryNext(ctx)
		if err := cs.Err(); err != nil {
			return nil, err
		}
		return nil, nil
	case "close":
		return nil, cs.Close(ctx)
	}
	return nil, unsupported("change stream operation %s", name)
}

func (r *run) cursorOp(ctx context.Context, cur *mongo.Cursor, name string, a *args) (any, error) {
	switch name {
	case "iterateUntilDocumentOrError":
		if cur.Next(ctx) {
			return cur.Current, nil
		}
		if err := cur.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("cursor exhausted")
	case "iterateOnce":
		cur.TryNext(ctx)
		return nil, cur.Err()
	case "close":
		return nil, cur.Close(ctx)
	}
	return nil, unsupported("cursor operation %s", name)
}

func (r *run) sessionOp(ctx context.Context, s *mongo.Session, name string, a *args) (any, error) {
	switch name {
	case "startTransaction":
		to, err := txnOptions(a.d)
		if err != nil {
			return nil, unsupported("%v", err)
		}
		r.en.txnUsed = true
		return nil, s.StartTransaction(to)
	case "commitTransaction":
		return nil, s.CommitTransaction(ctx)
	case "abortTransaction":
		return nil, s.AbortTransaction(ctx)
	case "endSession":
		s.EndSession(ctx)
		return nil, nil
	case "getSnapshotTime":
		return s.SnapshotTime(), nil
	case "withTransaction":
		cb, _ := a.get("callback")
		var rest bson.D
		for _, e := range a.d {
			if e.Key != "callback" {
				rest = append(rest, e)
			}
		}
		to, err := txnOptions(rest)
		if err != nil {
			return nil, unsupported("%v", err)
		}
		r.en.txnUsed = true
		_, err = s.WithTransaction(ctx, func(ctx context.Context) (any, error) {
			for _, ov := range cb.(bson.A) {
				if err := r.operation(ctx, ov.(bson.D)); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}, to)
		return nil, err
	}
	return nil, unsupported("session operation %s", name)
}

func (r *run) clientOp(ctx context.Context, c *mongo.Client, name string, a *args) (any, error) {
	ctx, err := r.sessCtx(ctx, a)
	if err != nil {
		return nil, err
	}
	switch name {
	case "listDatabases", "listDatabaseNames":
		filter, _ := a.get("filter")
		if filter == nil {
			filter = bson.D{}
		}
		o := options.ListDatabases()
		if b, ok := a.bool("nameOnly"); ok {
			o.SetNameOnly(b)
		}
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		if name == "listDatabaseNames" {
			return c.ListDatabaseNames(ctx, filter, o)
		}
		res, err := c.ListDatabases(ctx, filter, o)
		if err != nil {
			return nil, err
		}
		out := bson.A{}
		for _, d := range res.Databases {
			out = append(out, bson.D{{Key: "name", Value: d.Name}, {Key: "sizeOnDisk", Value: d.SizeOnDisk}, {Key: "empty", Value: d.Empty}})
		}
		return out, nil
	case "createChangeStream":
		pipeline, o, err := streamArgs(a)
		if err != nil {
			return nil, err
		}
		return c.Watch(ctx, pipeline, o)
	}
	return nil, unsupported("client operation %s", name)
}

func streamArgs(a *args) (any, *options.ChangeStreamOptionsBuilder, error) {
	pipeline, _ := a.get("pipeline")
	if pipeline == nil {
		pipeline = bson.A{}
	}
	o := options.ChangeStream()
	for _, e := range a.d {
		if a.used[e.Key] {
			continue
		}
		a.used[e.Key] = true
		switch e.Key {
		case "batchSize":
			n, _ := number(e.Value)
			o.SetBatchSize(int32(n))
		case "fullDocument":
			o.SetFullDocument(options.FullDocument(e.Value.(string)))
		case "fullDocumentBeforeChange":
			o.SetFullDocumentBeforeChange(options.FullDocument(e.Value.(string)))
		case "resumeAfter":
			o.SetResumeAfter(e.Value)
		case "startAfter":
			o.SetStartAfter(e.Value)
		case "startAtOperationTime":
			ts := e.Value.(bson.Timestamp)
			o.SetStartAtOperationTime(&ts)
		case "showExpandedEvents":
			o.SetShowExpandedEvents(e.Value.(bool))
		case "maxAwaitTimeMS":
			n, _ := number(e.Value)
			o.SetMaxAwaitTime(time.Duration(n) * time.Millisecond)
		case "comment":
			o.SetComment(e.Value)
		case "collation":
			o.SetCollation(collation(e.Value))
		case "session", "timeoutMS":
		default:
			return nil, nil, unsupported("createChangeStream argument %s", e.Key)
		}
	}
	return pipeline, o, nil
}

func collation(v any) options.Collation {
	d, _ := v.(bson.D)
	var c options.Collation
	for _, e := range d {
		switch e.Key {
		case "locale":
			c.Locale, _ = e.Value.(string)
		case "strength":
			n, _ := number(e.Value)
			c.Strength = int(n)
		case "caseLevel":
			c.CaseLevel, _ = e.Value.(bool)
		case "caseFirst":
			c.CaseFirst, _ = e.Value.(string)
		case "numericOrdering":
			c.NumericOrdering, _ = e.Value.(bool)
		case "alternate":
			c.Alternate, _ = e.Value.(string)
		case "maxVariable":
			c.MaxVariable, _ = e.Value.(string)
		case "normalization":
			c.Normalization, _ = e.Value.(bool)
		case "backwards":
			c.Backwards, _ = e.Value.(bool)
		}
	}
	return c
}

func (r *run) dbOp(ctx context.Context, db *mongo.Database, name string, a *args) (any, error) {
	ctx, err := r.sessCtx(ctx, a)
	if err != nil {
		return nil, err
	}
	switch name {
	case "runCommand":
		cmd, _ := a.get("command")
		a.get("commandName")
		o := options.RunCmd()
		if rp, ok := a.get("readPreference"); ok {
			p, err := readPref(rp.(bson.D))
			if err != nil {
				return nil, err
			}
			o.SetReadPreference(p)
		}
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		var out bson.D
		err := db.RunCommand(ctx, cmd, o).Decode(&out)
		return out, err
	case "runCursorCommand", "createCommandCursor":
		cmd, _ := a.get("command")
		a.get("commandName")
		o := options.RunCmd()
		if rp, ok := a.get("readPreference"); ok {
			p, err := readPref(rp.(bson.D))
			if err != nil {
				return nil, err
			}
			o.SetReadPreference(p)
		}
		if err := a.unused(); err != nil {
			// batchSize, maxTimeMS and comment of the getMores: the Go driver's
			// RunCommandCursor has no options for them
			return nil, unsupported("%v", err)
		}
		cur, err := db.RunCommandCursor(ctx, cmd, o)
		if err != nil {
			return nil, err
		}
		if name == "createCommandCursor" {
			return cur, nil
		}
		return all(ctx, cur)
	case "aggregate":
		pipeline, _ := a.get("pipeline")
		o, err := aggOptions(a)
		if err != nil {
			return nil, err
		}
		cur, err := db.Aggregate(ctx, pipeline, o)
		if err != nil {
			return nil, err
		}
		return all(ctx, cur)
	case "createCollection":
		o := options.CreateCollection()
		coll := a.str("collection")
		for _, e := range a.d {
			if a.used[e.Key] {
				continue
			}
			a.used[e.Key] = true
			switch e.Key {
			case "changeStreamPreAndPostImages":
				o.SetChangeStreamPreAndPostImages(e.Value)
			case "validator":
				o.SetValidator(e.Value)
			case "capped":
				o.SetCapped(e.Value.(bool))
			case "size":
				n, _ := number(e.Value)
				o.SetSizeInBytes(int64(n))
			case "expireAfterSeconds":
				n, _ := number(e.Value)
				o.SetExpireAfterSeconds(int64(n))
			case "clusteredIndex":
				o.SetClusteredIndex(e.Value)
			case "timeseries":
				ts := options.TimeSeries()
				d := e.Value.(bson.D)
				ts.SetTimeField(str(d, "timeField"))
				if s := str(d, "metaField"); s != "" {
					ts.SetMetaField(s)
				}
				if s := str(d, "granularity"); s != "" {
					ts.SetGranularity(s)
				}
				o.SetTimeSeriesOptions(ts)
			case "encryptedFields":
				o.SetEncryptedFields(e.Value)
			case "session", "timeoutMS":
			default:
				return nil, unsupported("createCollection argument %s", e.Key)
			}
		}
		if err := db.CreateCollection(ctx, coll, o); err != nil {
			return nil, err
		}
		return nil, nil
	case "dropCollection":
		coll := a.str("collection")
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		return nil, db.Collection(coll).Drop(ctx)
	case "listCollections", "listCollectionNames":
		filter, _ := a.get("filter")
		if filter == nil {
			filter = bson.D{}
		}
		o := options.ListCollections()
		if n, ok := a.int64("batchSize"); ok {
			o.SetBatchSize(int32(n))
		}
		if b, ok := a.bool("nameOnly"); ok {
			o.SetNameOnly(b)
		}
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		if name == "listCollectionNames" {
			return db.ListCollectionNames(ctx, filter, o)
		}
		cur, err := db.ListCollections(ctx, filter, o)
		if err != nil {
			return nil, err
		}
		return all(ctx, cur)
	case "modifyCollection":
		cmd := bson.D{{Key: "collMod", Value: a.str("collection")}}
		for _, e := range a.d {
			if !a.used[e.Key] && e.Key != "session" {
				cmd = append(cmd, e)
			}
		}
		var out bson.D
		return out, db.RunCommand(ctx, cmd).Decode(&out)
	case "createChangeStream":
		pipeline, o, err := streamArgs(a)
		if err != nil {
			return nil, err
		}
		return db.Watch(ctx, pipeline, o)
	}
	return nil, unsupported("database operation %s", name)
}

func all(ctx context.Context, cur *mongo.Cursor) (any, error) {
	defer func() { _ = cur.Close(ctx) }()
	out := bson.A{}
	for cur.Next(ctx) {
		out = append(out, normalize(cur.Current))
	}
	return out, cur.Err()
}

func aggOptions(a *args) (*options.AggregateOptionsBuilder, error) {
	o := options.Aggregate()
	for _, e := range a.d {
		if a.used[e.Key] {
			continue
		}
		a.used[e.Key] = true
		switch e.Key {
		case "batchSize":
			n, _ := number(e.Value)
			o.SetBatchSize(int32(n))
		case "allowDiskUse":
			o.SetAllowDiskUse(e.Value.(bool))
		case "bypassDocumentValidation":
			o.SetBypassDocumentValidation(e.Value.(bool))
		case "collation":
			c := collation(e.Value)
			o.SetCollation(&c)
		case "comment":
			o.SetComment(e.Value)
		case "hint":
			o.SetHint(e.Value)
		case "let":
			o.SetLet(e.Value)
		case "maxTimeMS":
			o.SetCustom(bson.M{"maxTimeMS": e.Value})
		case "session", "timeoutMS":
		default:
			return nil, unsupported("aggregate argument %s", e.Key)
		}
	}
	return o, nil
}
