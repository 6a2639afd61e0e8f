package snapshotapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// plainTransport sends only the headers a test sets (no implicit Accept-Encoding).
var plainTransport = &http.Transport{DisableCompression: true}

// apiAppName names the API's MongoDB client, so faults can target it alone.
const apiAppName = "snapshotapi-under-test"

var testKey = []byte("0123456789abcdef0123456789abcdef")

// ordersView is the view most tests serve: orders, projected by orders-view from topic
// orders, with every filter type, two sortable fields and a day of history.
func ordersView(db string) snapshotapi.View {
	return snapshotapi.View{
		Name: "orders", Projection: "orders-view", Topic: "orders", Partitions: 4, Database: db, Collection: "orders",
		Filters: map[string]snapshotapi.FieldType{
			"status": snapshotapi.String, "total": snapshotapi.Number, "paid": snapshotapi.Bool,
			"created": snapshotapi.Time, "customer.id": snapshotapi.String, "rank": snapshotapi.Number,
		},
		Sort: []string{"created", "rank"}, MaxLimit: 100, CacheControl: "max-age=5", History: 24 * time.Hour,
	}
}

// slimView serves the same collection with a few fields only.
func slimView(db string) snapshotapi.View {
	v := ordersView(db)
	v.Name, v.Fields, v.History = "slim", []string{"status", "customer.id"}, 0
	return v
}

// api is a Server under test behind a real HTTP server, with the MongoDB commands it sent.
type api struct {
	t     *testing.T
	srv   *snapshotapi.Server
	http  *httptest.Server
	slow  *httptest.Server // the API on sockets with small send buffers (rawConn)
	db    *mongo.Database  // the test's own client, for writing views
	reg   *prometheus.Registry
	mu    sync.Mutex
	finds []bson.Raw // filters of the find commands the API sent
	// streams are the collections of the change streams the API opened (aggregate with
	// $changeStream; "" for a database's).
	streams []string
	doc     *openapi3.T
	noSpec  bool
}

// apiOpt changes the Config or Deps of an API under test.
type apiOpt func(*snapshotapi.Config, *snapshotapi.Deps)

// withConfig changes the Config.
func withConfig(f func(*snapshotapi.Config)) apiOpt {
	return func(c *snapshotapi.Config, _ *snapshotapi.Deps) { f(c) }
}

// newAPI serves the orders and slim views of a fresh database; run starts the cache.
func newAPI(t *testing.T, run bool, opts ...apiOpt) *api {
	t.Helper()
	return newAPIAt(t, embeddedtest.MongoURI(t), embeddedtest.Mongo(t), run, opts...)
}

// newAPIAt is newAPI on the deployment at uri, writing views with db.
func newAPIAt(t *testing.T, uri string, db *mongo.Database, run bool, opts ...apiOpt) *api {
	t.Helper()
	a := &api{t: t, db: db, reg: prometheus.NewRegistry()}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "find":
			a.mu.Lock()
			a.finds = append(a.finds, append(bson.Raw(nil), e.Command.Lookup("filter").Document()...))
			a.mu.Unlock()
		case "aggregate":
			if st, err := e.Command.Lookup("pipeline").Array().IndexErr(0); err == nil {
				if _, err := st.Document().LookupErr("$changeStream"); err == nil {
					coll, _ := e.Command.Lookup("aggregate").StringValueOK()
					a.mu.Lock()
					a.streams = append(a.streams, coll)
					a.mu.Unlock()
				}
			}
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(mon).SetAppName(apiAppName))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	cfg := snapshotapi.Config{Views: []snapshotapi.View{ordersView(db.Name()), slimView(db.Name())}, CursorKey: testKey}
	deps := snapshotapi.Deps{Mongo: client}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	a.srv, err = snapshotapi.New(deps, cfg, snapshotapi.WithLogger(embeddedtest.Logger(t)), snapshotapi.WithRegisterer(a.reg))
	require.NoError(t, err)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.srv.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
		})
	} else {
		t.Cleanup(a.srv.StopHubs) // as Run's return does: no hub outlives the test
	}
	a.http = httptest.NewServer(a.srv)
	t.Cleanup(a.http.Close)
	return a
}

// streamsOn counts the change streams the API opened on coll.
func (a *api) streamsOn(coll string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.streams {
		if c == coll {
			n++
		}
	}
	return n
}

// findCount is the number of find commands sent so far.
func (a *api) findCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.finds)
}

// response is an answer, its body decoded from gzip when it was coded.
type response struct {
	*http.Response
	body []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// errorCode returns the code of an error body, checking its shape.
func (r response) errorCode(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "not the error shape: %s", r.body)
	require.Len(t, e, 3, "error has code, message, details: %s", r.body)
	require.IsType(t, map[string]any{}, e["details"])
	require.NotEmpty(t, e["message"])
	return e["code"].(string)
}

// get sends a request (headers as name, value pairs) and validates the response against
// /openapi.json.
func (a *api) get(path string, headers ...string) response {
	return a.do(http.MethodGet, path, headers...)
}

func (a *api) do(method, path string, headers ...string) response {
	t := a.t
	t.Helper()
	req, err := http.NewRequest(method, a.http.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := plainTransport.RoundTrip(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	body := raw
	if res.Header.Get("Content-Encoding") == "gzip" && len(raw) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		require.NoError(t, err)
		body, err = io.ReadAll(zr)
		require.NoError(t, err)
	}
	r := response{res, body}
	if !a.noSpec {
		a.validate(req, r)
	}
	return r
}

// spec loads /openapi.json once, checking it is a valid OpenAPI 3.1 document.
func (a *api) spec() *openapi3.T {
	t := a.t
	t.Helper()
	if a.doc != nil {
		return a.doc
	}
	res, err := http.Get(a.http.URL + "/openapi.json")
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "openapi %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(context.Background()), "the document is not valid OpenAPI")
	a.doc = doc
	return doc
}

// validate checks a response against the document: status, headers and body of the
// operation the request reached, or the Error schema for requests no operation takes.
func (a *api) validate(req *http.Request, r response) {
	t := a.t
	t.Helper()
	doc := a.spec()
	template := routeTemplate(doc, req.URL.Path)
	var op *openapi3.Operation
	var item *openapi3.PathItem
	if template != "" {
		item = doc.Paths.Find(template)
		op = item.GetOperation(req.Method)
	}
	if op == nil {
		require.GreaterOrEqual(t, r.StatusCode, 400, "%s %s reached no operation", req.Method, req.URL)
		validateError(t, doc, r)
		return
	}
	status := fmt.Sprint(r.StatusCode)
	resp := op.Responses.Value(status)
	if resp == nil {
		require.GreaterOrEqual(t, r.StatusCode, 400, "status %d is not documented for %s %s", r.StatusCode, req.Method, template)
		resp = op.Responses.Default()
	}
	require.NotNil(t, resp, "status %d of %s %s", r.StatusCode, req.Method, template)
	for name, h := range resp.Value.Headers {
		if h.Value.Required {
			require.NotEmpty(t, r.Header.Get(name), "header %s of %d", name, r.StatusCode)
		}
	}
	if req.Method == http.MethodHead || r.StatusCode == http.StatusNotModified {
		require.Empty(t, r.body, "%s %d has no body", req.Method, r.StatusCode)
		if r.StatusCode == http.StatusNotModified {
			require.NotEmpty(t, r.Header.Get("ETag"), "304 repeats the ETag")
		}
		return
	}
	require.NoError(t, a.validateBody(req, r.StatusCode, r.Header, r.body), "%s %s → %d %s", req.Method, req.URL, r.StatusCode, r.body)
}

// validateBody validates a response body (and headers) with kin-openapi against the
// operation req reaches.
func (a *api) validateBody(req *http.Request, status int, header http.Header, body []byte) error {
	doc := a.spec()
	template := routeTemplate(doc, req.URL.Path)
	item := doc.Paths.Find(template)
	if item == nil || item.GetOperation(req.Method) == nil {
		return fmt.Errorf("%s %s reaches no operation", req.Method, req.URL.Path)
	}
	route := &routers.Route{Spec: doc, Path: template, PathItem: item, Method: req.Method, Operation: item.GetOperation(req.Method)}
	hdr := header.Clone()
	hdr.Del("Content-Encoding")
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
		Status:                 status, Header: hdr,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

func validateError(t *testing.T, doc *openapi3.T, r response) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(r.body, &v), "error body %s", r.body)
	sch := doc.Components.Schemas["Error"].Value
	require.NoError(t, sch.VisitJSON(v, openapi3.EnableJSONSchema2020()), "error body %s", r.body)
}

// routeTemplate maps a request path to the document's path template.
func routeTemplate(doc *openapi3.T, path string) string {
	if doc.Paths.Find(path) != nil {
		return path
	}
	if rest, ok := strings.CutPrefix(path, "/v1/topics/"); ok {
		if topic, _, ok := strings.Cut(rest, "/keys/"); ok {
			if tmpl := "/v1/topics/" + topic + "/keys/{key}"; doc.Paths.Find(tmpl) != nil {
				return tmpl
			}
		}
		return ""
	}
	rest, ok := strings.CutPrefix(path, "/v1/views/")
	if !ok {
		return ""
	}
	view, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	if tmpl := "/v1/views/" + view + "/{key}"; doc.Paths.Find(tmpl) != nil {
		return tmpl
	}
	return ""
}

// doc is a view document as a changelog projection writes it (docs/views.md).
func doc(key string, v int64, ts time.Time, fields bson.D) bson.D {
	d := bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: v}, {Key: "_ts", Value: bson.NewDateTimeFromTime(ts)}, {Key: "_topic", Value: "orders"}}
	return append(d, fields...)
}

func (a *api) put(coll string, docs ...bson.D) {
	a.t.Helper()
	for _, d := range docs {
		_, err := a.db.Collection(coll).ReplaceOne(context.Background(), bson.D{{Key: "_id", Value: d[0].Value}}, d, options.Replace().SetUpsert(true))
		require.NoError(a.t, err)
	}
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, msg)
}
