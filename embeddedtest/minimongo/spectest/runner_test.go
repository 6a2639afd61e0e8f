package spectest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

var (
	flagAll     = flag.Bool("spec.all", false, "run every applicable test of every area (make spec-mongo) instead of the quick sample")
	flagRun     = flag.String("spec.run", "", "only the tests whose \"area/file/description\" matches this regular expression")
	flagVerbose = flag.Bool("spec.v", false, "print each failing test's reason")
	flagMin     = flag.Float64("spec.min", minPassRate, "the pass rate (percent of applicable tests) below which the run fails")
	flagDir     = flag.String("spec.dir", "", "the source directory of a checkout of github.com/mongodb/specifications to read the tests from instead of "+specModule)
)

// specModule is the module whose testdata holds MongoDB's specification tests in the unified
// format (v1 of the Go driver keeps them in its module zip; v2 takes them from a git
// submodule that the module proxy does not serve).
const specModule = "go.mongodb.org/mongo-driver@v1.17.10"

// minPassRate is the acceptance threshold of issue 26.
const minPassRate = 85.0

// areas are the specification areas run, and where their unified tests are in specModule.
// specsDir is where each area is in a checkout of the specifications repository
// (-spec.dir).
var areas = []struct{ name, dir, specsDir string }{
	{"crud", "crud/unified", "crud/tests/unified"},
	{"change-streams", "change-streams", "change-streams/tests/unified"},
	{"transactions", "transactions/unified", "transactions/tests/unified"},
	{"sessions", "sessions", "sessions/tests"},
	{"retryable-writes", "retryable-writes/unified", "retryable-writes/tests/unified"},
	{"index-management", "index-management", "index-management/tests"},
	{"collection-management", "collection-management", "collection-management/tests"},
	{"run-command", "run-command", "run-command/tests/unified"},
}

// specDir returns the testdata directory of specModule, downloading the module through
// the Go toolchain (its module cache, or the configured proxy) when needed.
func specDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", specModule)
	cmd.Dir = t.TempDir() // outside jetbus's module: go.mod and go.sum stay as they are
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil || info.Dir == "" {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		t.Skipf("the specification tests come from %s's testdata, which cannot be downloaded here (offline without a module cache?): %v", specModule, err)
	}
	return filepath.Join(info.Dir, "testdata")
}

// result is the outcome of one specification test.
type result struct {
	area, file, test string
	applicable       bool
	pass             bool
	reason           string
}

// TestUnifiedSpec runs MongoDB's unified specification tests through the Go driver, each
// against a fresh backend, and reports the pass rate per area. By default a sample of each
// area runs (a quick check for make test); -spec.all runs everything (make spec-mongo).
func TestUnifiedSpec(t *testing.T) {
	var dir string
	if *flagDir == "" {
		dir = specDir(t)
	}
	var filter *regexp.Regexp
	if *flagRun != "" {
		filter = regexp.MustCompile(*flagRun)
	}
	var results []result
	for _, a := range areas {
		sub := filepath.Join(dir, a.dir)
		if *flagDir != "" {
			sub = filepath.Join(*flagDir, a.specsDir)
		}
		files, err := filepath.Glob(filepath.Join(sub, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no specification files in %s: %v", sub, err)
		}
		sort.Strings(files)
		seq := 0
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var file bson.D
			if err := bson.UnmarshalExtJSON(raw, false, &file); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if _, ok := lookup(file, "schemaVersion"); !ok {
				continue // not in the unified format
			}
			for _, tv := range arr(file, "tests") {
				td, _ := tv.(bson.D)
				r := result{area: a.name, file: strings.TrimSuffix(filepath.Base(f), ".json"), test: str(td, "description")}
				name := r.area + "/" + r.file + "/" + r.test
				if filter != nil && !filter.MatchString(name) {
					continue
				}
				if why := notApplicable(file, td); why != "" {
					r.reason = why
					results = append(results, r)
					continue
				}
				r.applicable = true
				seq++
				if !*flagAll && filter == nil && seq%sampleEvery != 0 {
					continue
				}
				err := runTest(t, file, td)
				r.pass = err == nil
				if err != nil {
					r.reason = err.Error()
				}
				results = append(results, r)
			}
		}
	}
	report(t, results)
}

// sampleEvery: the quick run takes every sampleEvery-th applicable test of each area.
const sampleEvery = 2

func report(t *testing.T, results []result) {
	type tally struct{ ran, pass, na int }
	per := map[string]*tally{}
	var total tally
	for _, r := range results {
		ta := per[r.area]
		if ta == nil {
			ta = &tally{}
			per[r.area] = ta
		}
		switch {
		case !r.applicable:
			ta.na++
			total.na++
		default:
			ta.ran++
			total.ran++
			if r.pass {
				ta.pass++
				total.pass++
			} else if *flagVerbose {
				t.Logf("FAIL %s/%s/%s: %s", r.area, r.file, r.test, r.reason)
			}
		}
	}
	var b strings.Builder
	src := specModule
	if *flagDir != "" {
		src = *flagDir
	}
	fmt.Fprintf(&b, "MongoDB unified specification tests (%s) against minimongo:\n", src)
	fmt.Fprintf(&b, "  %-22s %8s %8s %8s %8s\n", "area", "passed", "ran", "rate", "n/a")
	for _, a := range areas {
		ta := per[a.name]
		if ta == nil {
			continue
		}
		fmt.Fprintf(&b, "  %-22s %8d %8d %7.1f%% %8d\n", a.name, ta.pass, ta.ran, pct(ta.pass, ta.ran), ta.na)
	}
	rate := pct(total.pass, total.ran)
	fmt.Fprintf(&b, "  %-22s %8d %8d %7.1f%% %8d\n", "overall", total.pass, total.ran, rate, total.na)
	if !*flagAll {
		fmt.Fprintf(&b, "  (a sample: 1 in %d applicable tests; make spec-mongo runs all)\n", sampleEvery)
	}
	fmt.Print(b.String())
	if total.ran > 0 && rate < *flagMin {
		t.Errorf("pass rate %.1f%% is below %.1f%%", rate, *flagMin)
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// ---- applicability ----

// serverVersion is the version minimongo reports (maxWireVersion 21).
var serverVersion = []int{7, 0, 0}

// notApplicable says why a test does not apply to a MongoDB 7.0 single-member replica set
// without authentication, or "" when it does. See the package doc.
func notApplicable(file, test bson.D) string {
	if s := str(test, "skipReason"); s != "" {
		return "skipReason: " + s
	}
	for _, reqs := range []bson.A{arr(file, "runOnRequirements"), arr(test, "runOnRequirements")} {
		if len(reqs) == 0 {
			continue
		}
		why := ""
		ok := false
		for _, rv := range reqs {
			w := requirementUnmet(rv.(bson.D))
			if w == "" {
				ok = true
				break
			}
			why = w
		}
		if !ok {
			return why
		}
	}
	for _, ev := range arr(file, "createEntities") {
		d, _ := ev.(bson.D)
		if len(d) > 0 && (d[0].Key == "clientEncryption" || d[0].Key == "bucket") {
			return "entity " + d[0].Key
		}
	}
	return ""
}

func requirementUnmet(req bson.D) string {
	for _, e := range req {
		switch e.Key {
		case "minServerVersion":
			if compareVersion(e.Value.(string)) > 0 {
				return "needs server " + e.Value.(string)
			}
		case "maxServerVersion":
			if compareVersion(e.Value.(string)) < 0 {
				return "needs server at most " + e.Value.(string)
			}
		case "topologies":
			found := false
			for _, x := range e.Value.(bson.A) {
				if x == "replicaset" {
					found = true
				}
			}
			if !found {
				return fmt.Sprintf("topologies %v", e.Value)
			}
		case "serverless":
			if e.Value == "require" {
				return "serverless"
			}
		case "auth":
			if b, _ := e.Value.(bool); b {
				return "auth"
			}
		case "csfle":
			if b, _ := e.Value.(bool); b {
				return "csfle"
			}
		case "authMechanism":
			return "authMechanism"
		case "serverParameters":
			return "serverParameters " + show(e.Value)
		default:
			return "unknown requirement " + e.Key
		}
	}
	return ""
}

// compareVersion compares v with serverVersion: positive when v is newer.
func compareVersion(v string) int {
	parts := strings.Split(v, ".")
	for i := 0; i < 3; i++ {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		if n != serverVersion[i] {
			return n - serverVersion[i]
		}
	}
	return 0
}

// ---- one test ----

type recorded struct {
	kind   string // commandStartedEvent, commandSucceededEvent, commandFailedEvent, or a CMAP event name
	name   string
	db     string
	cmd    bson.D
	reply  bson.D
	client string
}

type clientEnt struct {
	id        string
	c         *mongo.Client
	mu        sync.Mutex
	events    []recorded
	observe   map[string]bool
	ignore    map[string]bool
	sensitive bool
	started   []bson.D // every command started (for the lsid assertions)
}

func (c *clientEnt) record(r recorded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.kind == "commandStartedEvent" {
		c.started = append(c.started, r.cmd)
	}
	if !c.observe[r.kind] || c.ignore[r.name] || r.name == "configureFailPoint" {
		return
	}
	if !c.sensitive && sensitiveCommands[strings.ToLower(r.name)] {
		return
	}
	c.events = append(c.events, r)
}

var sensitiveCommands = map[string]bool{
	"authenticate": true, "saslstart": true, "saslcontinue": true, "getnonce": true, "createuser": true,
	"updateuser": true, "copydbgetnonce": true, "copydbsaslstart": true, "copydb": true,
}

type entities struct {
	uri      string
	clients  map[string]*clientEnt
	dbs      map[string]*mongo.Database
	colls    map[string]*mongo.Collection
	sessions map[string]*mongo.Session
	lsids    map[string]bson.D
	streams  map[string]*mongo.ChangeStream
	cursors  map[string]*mongo.Cursor
	values   map[string]any
	owner    map[string]string // database, collection and session entity → client entity
	failOn   []*mongo.Client   // clients fail points were configured through
	txnUsed  bool
}

func newEntities(uri string) *entities {
	return &entities{uri: uri, clients: map[string]*clientEnt{}, dbs: map[string]*mongo.Database{},
		colls: map[string]*mongo.Collection{}, sessions: map[string]*mongo.Session{}, lsids: map[string]bson.D{},
		streams: map[string]*mongo.ChangeStream{}, cursors: map[string]*mongo.Cursor{}, values: map[string]any{},
		owner: map[string]string{}}
}

func (en *entities) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cs := range en.streams {
		_ = cs.Close(ctx)
	}
	for _, c := range en.cursors {
		_ = c.Close(ctx)
	}
	for _, s := range en.sessions {
		s.EndSession(ctx)
	}
	for _, c := range en.clients {
		_ = c.c.Disconnect(ctx)
	}
}

func (en *entities) create(list bson.A) error {
	for _, ev := range list {
		d, _ := ev.(bson.D)
		if len(d) != 1 {
			return fmt.Errorf("malformed entity %s", show(d))
		}
		spec, _ := d[0].Value.(bson.D)
		id := str(spec, "id")
		switch d[0].Key {
		case "client":
			c, err := en.newClient(spec)
			if err != nil {
				return fmt.Errorf("client %s: %w", id, err)
			}
			en.clients[id] = c
		case "database":
			c := en.clients[str(spec, "client")]
			if c == nil {
				return fmt.Errorf("database %s: no client %s", id, str(spec, "client"))
			}
			opts, err := dbOptions(doc(spec, "databaseOptions"))
			if err != nil {
				return err
			}
			en.dbs[id] = c.c.Database(str(spec, "databaseName"), opts)
			en.owner[id] = str(spec, "client")
		case "collection":
			db := en.dbs[str(spec, "database")]
			if db == nil {
				return fmt.Errorf("collection %s: no database %s", id, str(spec, "database"))
			}
			o, err := dbOptions(doc(spec, "collectionOptions"))
			if err != nil {
				return err
			}
			co := options.Collection()
			co.Opts = append(co.Opts, func(x *options.CollectionOptions) error {
				var dbo options.DatabaseOptions
				for _, f := range o.Opts {
					if err := f(&dbo); err != nil {
						return err
					}
				}
				x.ReadConcern, x.WriteConcern, x.ReadPreference = dbo.ReadConcern, dbo.WriteConcern, dbo.ReadPreference
				return nil
			})
			en.colls[id] = db.Collection(str(spec, "collectionName"), co)
			en.owner[id] = en.owner[str(spec, "database")]
		case "session":
			c := en.clients[str(spec, "client")]
			if c == nil {
				return fmt.Errorf("session %s: no client %s", id, str(spec, "client"))
			}
			so := options.Session()
			for _, e := range doc(spec, "sessionOptions") {
				switch e.Key {
				case "causalConsistency":
					so.SetCausalConsistency(e.Value.(bool))
				case "snapshot":
					so.SetSnapshot(e.Value.(bool))
				case "snapshotTime":
					ts, ok := en.values[fmt.Sprint(e.Value)].(bson.Timestamp)
					if !ok {
						return fmt.Errorf("session %s: snapshotTime %v is not a saved timestamp", id, e.Value)
					}
					so.SetSnapshotTime(ts)
				case "defaultTransactionOptions":
					to, err := txnOptions(e.Value.(bson.D))
					if err != nil {
						return err
					}
					so.SetDefaultTransactionOptions(to)
				default:
					return fmt.Errorf("unsupported session option %s", e.Key)
				}
			}
			s, err := c.c.StartSession(so)
			if err != nil {
				return err
			}
			en.sessions[id] = s
			en.lsids[id] = normalize(s.ID()).(bson.D)
			en.owner[id] = str(spec, "client")
		case "thread":
			en.values[id] = "thread"
		default:
			return fmt.Errorf("unsupported entity type %s", d[0].Key)
		}
	}
	return nil
}

func (en *entities) newClient(spec bson.D) (*clientEnt, error) {
	ce := &clientEnt{id: str(spec, "id"), observe: map[string]bool{}, ignore: map[string]bool{}}
	u, err := url.Parse(en.uri)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	for _, e := range doc(spec, "uriOptions") {
		var v string
		switch x := e.Value.(type) {
		case string:
			v = x
		case bool:
			v = strconv.FormatBool(x)
		case int32, int64, float64:
			n, _ := number(x)
			v = strconv.FormatInt(int64(n), 10)
		default:
			return nil, fmt.Errorf("unsupported uriOption %s: %s", e.Key, show(e.Value))
		}
		if e.Key == "socketTimeoutMS" {
			return nil, errors.New("uriOption socketTimeoutMS: the Go driver v2 has no socket timeout")
		}
		q.Set(e.Key, v)
	}
	u.RawQuery = q.Encode()
	o := options.Client().ApplyURI(u.String())
	for _, e := range spec {
		switch e.Key {
		case "id", "uriOptions", "useMultipleMongoses":
		case "observeEvents":
			for _, x := range e.Value.(bson.A) {
				ce.observe[x.(string)] = true
			}
		case "ignoreCommandMonitoringEvents":
			for _, x := range e.Value.(bson.A) {
				ce.ignore[x.(string)] = true
			}
		case "observeSensitiveCommands":
			ce.sensitive, _ = e.Value.(bool)
		case "serverApi":
			sa := e.Value.(bson.D)
			api := options.ServerAPI(options.ServerAPIVersion(str(sa, "version")))
			if v, ok := lookup(sa, "strict"); ok {
				api.SetStrict(v.(bool))
			}
			if v, ok := lookup(sa, "deprecationErrors"); ok {
				api.SetDeprecationErrors(v.(bool))
			}
			o.SetServerAPIOptions(api)
		default:
			return nil, fmt.Errorf("unsupported client option %s", e.Key)
		}
	}
	o.SetMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			ce.record(recorded{kind: "commandStartedEvent", name: e.CommandName, db: e.DatabaseName, cmd: normalize(e.Command).(bson.D)})
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			ce.record(recorded{kind: "commandSucceededEvent", name: e.CommandName, db: e.DatabaseName, reply: normalize(e.Reply).(bson.D)})
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			ce.record(recorded{kind: "commandFailedEvent", name: e.CommandName, db: e.DatabaseName})
		},
	})
	o.SetPoolMonitor(&event.PoolMonitor{Event: func(e *event.PoolEvent) {
		name := map[string]string{
			event.ConnectionCreated: "connectionCreatedEvent", event.ConnectionReady: "connectionReadyEvent",
			event.ConnectionClosed: "connectionClosedEvent", event.ConnectionCheckOutStarted: "connectionCheckOutStartedEvent",
			event.ConnectionCheckOutFailed: "connectionCheckOutFailedEvent", event.ConnectionCheckedOut: "connectionCheckedOutEvent",
			event.ConnectionCheckedIn: "connectionCheckedInEvent", event.ConnectionPoolCreated: "poolCreatedEvent",
			event.ConnectionPoolReady: "poolReadyEvent", event.ConnectionPoolCleared: "poolClearedEvent", event.ConnectionPoolClosed: "poolClosedEvent",
		}[e.Type]
		if name != "" {
			ce.record(recorded{kind: name})
		}
	}})
	c, err := mongo.Connect(o)
	if err != nil {
		return nil, err
	}
	ce.c = c
	return ce, nil
}

func dbOptions(d bson.D) (*options.DatabaseOptionsBuilder, error) {
	o := options.Database()
	for _, e := range d {
		v, _ := e.Value.(bson.D)
		switch e.Key {
		case "readConcern":
			o.SetReadConcern(&readconcern.ReadConcern{Level: str(v, "level")})
		case "writeConcern":
			wc, err := writeConcern(v)
			if err != nil {
				return nil, err
			}
			o.SetWriteConcern(wc)
		case "readPreference":
			rp, err := readPref(v)
			if err != nil {
				return nil, err
			}
			o.SetReadPreference(rp)
		case "timeoutMS":
			return nil, errors.New("unsupported collection/database option timeoutMS")
		default:
			return nil, fmt.Errorf("unsupported database/collection option %s", e.Key)
		}
	}
	return o, nil
}

func writeConcern(d bson.D) (*writeconcern.WriteConcern, error) {
	wc := &writeconcern.WriteConcern{}
	for _, e := range d {
		switch e.Key {
		case "w":
			if s, ok := e.Value.(string); ok {
				wc.W = s
			} else {
				n, _ := number(e.Value)
				wc.W = int(n)
			}
		case "journal", "j":
			b := e.Value.(bool)
			wc.Journal = &b
		case "wtimeoutMS":
			return nil, errors.New("write concern wtimeoutMS: the Go driver v2 has none")
		default:
			return nil, fmt.Errorf("unsupported write concern field %s", e.Key)
		}
	}
	return wc, nil
}

func readPref(d bson.D) (*readpref.ReadPref, error) {
	mode, err := readpref.ModeFromString(str(d, "mode"))
	if err != nil {
		return nil, err
	}
	var opts []readpref.Option
	for _, e := range d {
		switch e.Key {
		case "mode":
		case "maxStalenessSeconds":
			n, _ := number(e.Value)
			opts = append(opts, readpref.WithMaxStaleness(time.Duration(n)*time.Second))
		case "tagSets":
			for _, ts := range e.Value.(bson.A) {
				var tags []string
				for _, t := range ts.(bson.D) {
					tags = append(tags, t.Key, fmt.Sprint(t.Value))
				}
				opts = append(opts, readpref.WithTags(tags...))
			}
		case "hedge":
			return nil, errors.New("read preference hedge: not in the Go driver v2")
		default:
			return nil, fmt.Errorf("unsupported read preference field %s", e.Key)
		}
	}
	return readpref.New(mode, opts...)
}

func txnOptions(d bson.D) (*options.TransactionOptionsBuilder, error) {
	o := options.Transaction()
	for _, e := range d {
		v, _ := e.Value.(bson.D)
		switch e.Key {
		case "readConcern":
			o.SetReadConcern(&readconcern.ReadConcern{Level: str(v, "level")})
		case "writeConcern":
			wc, err := writeConcern(v)
			if err != nil {
				return nil, err
			}
			o.SetWriteConcern(wc)
		case "readPreference":
			rp, err := readPref(v)
			if err != nil {
				return nil, err
			}
			o.SetReadPreference(rp)
		case "maxCommitTimeMS":
			return nil, errors.New("unsupported transaction option maxCommitTimeMS (not in the Go driver v2)")
		default:
			return nil, fmt.Errorf("unsupported transaction option %s", e.Key)
		}
	}
	return o, nil
}

// runTest runs one test against a fresh backend.
func runTest(t *testing.T, file, test bson.D) (err error) {
	srv, err := minimongo.Start(minimongo.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	internal, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		return err
	}
	defer func() { _ = internal.Disconnect(context.Background()) }()
	// No deadline: with one the driver retries a retryable operation until it passes
	// (client-side operation timeout semantics) instead of once. go test's -timeout bounds
	// a hung test; operations that wait (change streams) have their own deadlines.
	ctx := context.Background()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("runner panic: %v", r)
		}
	}()
	if err := loadData(ctx, internal, arr(file, "initialData")); err != nil {
		return fmt.Errorf("initialData: %w", err)
	}
	// The driver discovers the one-member replica set, as the tests expect (the
	// backend's own URI connects directly, which makes the driver add a
	// primaryPreferred read preference to every command).
	uri := strings.Replace(srv.URI(), "&directConnection=true", "", 1)
	en := newEntities(uri)
	defer en.close()
	if err := en.create(arr(file, "createEntities")); err != nil {
		return fmt.Errorf("createEntities: %w", err)
	}
	r := &run{en: en, m: &matcher{ents: en}, internal: internal}
	for i, ov := range arr(test, "operations") {
		op, _ := ov.(bson.D)
		if err := r.operation(ctx, op); err != nil {
			return fmt.Errorf("operation %d (%s.%s): %w", i, str(op, "object"), str(op, "name"), err)
		}
	}
	for _, c := range en.clients {
		c.mu.Lock()
		c.observe = map[string]bool{}
		c.mu.Unlock()
	}
	for _, ev := range arr(test, "expectEvents") {
		if err := r.expectEvents(ev.(bson.D)); err != nil {
			return err
		}
	}
	for _, ov := range arr(test, "outcome") {
		if err := r.outcome(ctx, ov.(bson.D)); err != nil {
			return err
		}
	}
	return nil
}

func loadData(ctx context.Context, c *mongo.Client, data bson.A) error {
	wc := options.Collection().SetWriteConcern(writeconcern.Majority())
	for _, dv := range data {
		d := dv.(bson.D)
		db := c.Database(str(d, "databaseName"))
		coll := db.Collection(str(d, "collectionName"), wc)
		if err := coll.Drop(ctx); err != nil {
			return err
		}
		docs := arr(d, "documents")
		if co := doc(d, "createOptions"); co != nil {
			cmd := append(bson.D{{Key: "create", Value: coll.Name()}}, co...)
			cmd = append(cmd, bson.E{Key: "writeConcern", Value: bson.D{{Key: "w", Value: "majority"}}})
			if err := db.RunCommand(ctx, cmd).Err(); err != nil {
				return err
			}
		} else if len(docs) == 0 {
			if err := db.CreateCollection(ctx, coll.Name()); err != nil {
				return err
			}
		}
		if len(docs) > 0 {
			if _, err := coll.InsertMany(ctx, []any(docs)); err != nil {
				return err
			}
		}
	}
	return nil
}

type run struct {
	en       *entities
	m        *matcher
	internal *mongo.Client
}

func (r *run) outcome(ctx context.Context, d bson.D) error {
	coll := r.internal.Database(str(d, "databaseName")).Collection(str(d, "collectionName"),
		options.Collection().SetReadConcern(readconcern.Local()))
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return fmt.Errorf("outcome: %w", err)
	}
	var got []bson.D
	if err := cur.All(ctx, &got); err != nil {
		return fmt.Errorf("outcome: %w", err)
	}
	want := arr(d, "documents")
	if len(got) != len(want) {
		return fmt.Errorf("outcome %s: want %d documents %s, got %d %s", coll.Name(), len(want), show(want), len(got), show(normalize(got)))
	}
	for i := range want {
		if !equalExact(want[i], normalize(got[i])) {
			return fmt.Errorf("outcome %s[%d]: want %s, got %s", coll.Name(), i, show(want[i]), show(normalize(got[i])))
		}
	}
	return nil
}

func (r *run) expectEvents(d bson.D) error {
	c := r.en.clients[str(d, "client")]
	if c == nil {
		return fmt.Errorf("expectEvents: no client %s", str(d, "client"))
	}
	kind := str(d, "eventType")
	c.mu.Lock()
	var got []recorded
	for _, e := range c.events {
		isCmd := strings.HasPrefix(e.kind, "command")
		if (kind == "" || kind == "command") == isCmd {
			got = append(got, e)
		}
	}
	c.mu.Unlock()
	want := arr(d, "events")
	extra, _ := lookup(d, "ignoreExtraEvents")
	if b, _ := extra.(bool); b {
		if len(got) > len(want) {
			got = got[:len(want)]
		}
	}
	if len(got) != len(want) {
		names := []string{}
		for _, g := range got {
			names = append(names, g.kind+":"+g.name)
		}
		return fmt.Errorf("expectEvents %s: want %d events, got %d %v", c.id, len(want), len(got), names)
	}
	for i, wv := range want {
		w := wv.(bson.D)
		g := got[i]
		if w[0].Key != g.kind {
			return fmt.Errorf("event %d: want %s, got %s %s", i, w[0].Key, g.kind, g.name)
		}
		spec, _ := w[0].Value.(bson.D)
		for _, e := range spec {
			var err error
			switch e.Key {
			case "command":
				err = r.m.match(e.Value, g.cmd, true, "command")
			case "reply":
				err = r.m.match(e.Value, g.reply, true, "reply")
			case "commandName":
				if e.Value != g.name {
					err = fmt.Errorf("commandName: want %v, got %s", e.Value, g.name)
				}
			case "databaseName":
				if e.Value != g.db {
					err = fmt.Errorf("databaseName: want %v, got %s", e.Value, g.db)
				}
			case "hasServiceId", "hasServerConnectionId":
			default:
				err = fmt.Errorf("unsupported event field %s", e.Key)
			}
			if err != nil {
				return fmt.Errorf("event %d (%s %s): %w", i, g.kind, g.name, err)
			}
		}
	}
	return nil
}
