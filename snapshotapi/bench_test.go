package snapshotapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/snapshotapi"
)

// The benchmarks compare the API with a bare echo handler in the same run, against the same
// MongoDB test backend, in rounds that alternate which side goes first: called in-process
// (ServeHTTP, the response written as net/http writes it: the handlers' own cost), and for
// the conditional and uncached reads also served by net/http over loopback (what a client
// sees). "raw" is what a user would write without the API:
// echo routing to a handler that returns a constant (for the 304 path) or does the same
// FindOne by _id with the driver and encodes the bson.M as JSON (for the 200 path).
// BENCHMARKS.md holds the figures and the command.

const abRounds = 10

// ab runs raw(n) and api(n) alternately and reports both rates and api/raw throughput.
func ab(b *testing.B, raw, api func(n int) time.Duration) {
	n := max(b.N/abRounds, 1)
	var rawT, apiT time.Duration
	for i := range abRounds {
		if i%2 == 0 {
			rawT += raw(n)
			apiT += api(n)
		} else {
			apiT += api(n)
			rawT += raw(n)
		}
	}
	ops := float64(n * abRounds)
	b.ReportMetric(float64(rawT.Nanoseconds())/ops, "raw-ns/op")
	b.ReportMetric(float64(apiT.Nanoseconds())/ops, "api-ns/op")
	b.ReportMetric(float64(rawT)/float64(apiT), "throughput-ratio")
	b.ReportMetric(0, "ns/op")
}

type benchEnv struct {
	srv, noCache *snapshotapi.Server
	coll         *mongo.Collection
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	db := embeddedtest.Mongo(b)
	coll := db.Collection("orders")
	var docs []any
	for i := range 200 {
		docs = append(docs, doc(fmt.Sprintf("order-%04d", i), int64(1000+i), t0, bson.D{
			{Key: "status", Value: "paid"}, {Key: "total", Value: 42.5 + float64(i)}, {Key: "paid", Value: true},
			{Key: "created", Value: bson.NewDateTimeFromTime(t0.Add(time.Duration(i) * time.Second))},
			{Key: "customer", Value: bson.D{{Key: "id", Value: "c-987"}, {Key: "name", Value: "Ada Lovelace"}}},
			{Key: "items", Value: bson.A{"sku-1", "sku-2", "sku-3"}}, {Key: "rank", Value: int64(i % 7)},
			{Key: "note", Value: "left at the door"},
		}))
	}
	_, err := coll.InsertMany(context.Background(), docs)
	require.NoError(b, err)
	cfg := snapshotapi.Config{Views: []snapshotapi.View{ordersView(db.Name())}, CursorKey: testKey}
	e := &benchEnv{coll: coll}
	e.srv, err = snapshotapi.New(snapshotapi.Deps{Mongo: db.Client()}, cfg, snapshotapi.WithRegisterer(prometheus.NewRegistry()))
	require.NoError(b, err)
	cfg.CacheBytes = -1
	e.noCache, err = snapshotapi.New(snapshotapi.Deps{Mongo: db.Client()}, cfg, snapshotapi.WithRegisterer(prometheus.NewRegistry()))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.srv.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	// Wait until the cache answers: a read, then reads that do not reach MongoDB.
	req := httptest.NewRequest(http.MethodGet, "/v1/views/orders/order-0007", nil)
	require.Eventually(b, func() bool {
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, req)
		return w.Code == 200 && w.Header().Get("ETag") != ""
	}, 10*time.Second, 10*time.Millisecond)
	return e
}

// wireWriter is the response side of a connection without the network: it writes the
// status line and header fields as net/http does (Header.Write: sorted, one line per value)
// and the body, into a buffer reused between requests. httptest.ResponseRecorder would
// instead clone the header map at WriteHeader, a cost of the recorder that a server does
// not have and that grows with the headers a response carries.
type wireWriter struct {
	h    http.Header
	buf  bytes.Buffer
	code int
}

func (w *wireWriter) Header() http.Header { return w.h }

func (w *wireWriter) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	w.buf.WriteString("HTTP/1.1 ")
	w.buf.WriteString(strconv.Itoa(code))
	w.buf.WriteString("\r\n")
	_ = w.h.Write(&w.buf)
	w.buf.WriteString("\r\n")
}

func (w *wireWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.buf.Write(p)
}

func (w *wireWriter) reset() {
	clear(w.h)
	w.buf.Reset()
	w.code = 0
}

// serve runs n requests against h and returns the time taken.
func serve(b *testing.B, h http.Handler, req *http.Request, want int, n int) time.Duration {
	w := &wireWriter{h: http.Header{}}
	start := time.Now()
	for range n {
		w.reset()
		h.ServeHTTP(w, req)
		if w.code != want {
			b.Fatalf("%s: %d %s", req.URL, w.code, w.buf.String())
		}
	}
	return time.Since(start)
}

func rawEcho(route string, h echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	e.GET(route, h)
	return e
}

// overHTTP runs n requests to h served by net/http on loopback, one keep-alive connection,
// and returns the time taken: what a client of either server sees.
func overHTTP(b *testing.B, h http.Handler, path string, header http.Header, want int) func(n int) time.Duration {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1}}
	b.Cleanup(client.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(b, err)
	req.Header = header
	return func(n int) time.Duration {
		start := time.Now()
		for range n {
			res, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode != want {
				b.Fatalf("%s: %d", path, res.StatusCode)
			}
		}
		return time.Since(start)
	}
}

// BenchmarkNotModified: a conditional GET answered 304 (from the cache) against echo
// returning a constant, as handlers (in-process, the response written as net/http would)
// and over HTTP on loopback.
func BenchmarkNotModified(b *testing.B) {
	e := newBenchEnv(b)
	w := httptest.NewRecorder()
	e.srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/views/orders/order-0007", nil))
	etag := w.Header().Get("ETag")
	req := httptest.NewRequest(http.MethodGet, "/v1/views/orders/order-0007", nil)
	req.Header.Set("If-None-Match", etag)
	constant := []byte(`{"ok":true}`)
	raw := rawEcho("/v1/views/:view/:key", func(c echo.Context) error { return c.JSONBlob(200, constant) })
	rawReq := httptest.NewRequest(http.MethodGet, "/v1/views/orders/order-0007", nil)
	b.Run("handler", func(b *testing.B) {
		ab(b, func(n int) time.Duration { return serve(b, raw, rawReq, 200, n) },
			func(n int) time.Duration { return serve(b, e.srv, req, http.StatusNotModified, n) })
	})
	b.Run("http", func(b *testing.B) {
		ab(b, overHTTP(b, raw, "/v1/views/orders/order-0007", http.Header{}, 200),
			overHTTP(b, e.srv, "/v1/views/orders/order-0007", http.Header{"If-None-Match": {etag}}, http.StatusNotModified))
	})
}

// BenchmarkGet: a GET answered 200 against echo doing the same FindOne with the driver and
// encoding the document: through MongoDB (the cache off), and from the cache.
func BenchmarkGet(b *testing.B) {
	e := newBenchEnv(b)
	raw := rawEcho("/v1/views/:view/:key", func(c echo.Context) error {
		var m bson.M
		if err := e.coll.FindOne(c.Request().Context(), bson.D{{Key: "_id", Value: c.Param("key")}}).Decode(&m); err != nil {
			return err
		}
		return c.JSON(200, m)
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/views/orders/order-0007", nil)
	b.Run("mongo", func(b *testing.B) {
		ab(b, func(n int) time.Duration { return serve(b, raw, req, 200, n) },
			func(n int) time.Duration { return serve(b, e.noCache, req, 200, n) })
	})
	b.Run("mongo-http", func(b *testing.B) {
		ab(b, overHTTP(b, raw, "/v1/views/orders/order-0007", http.Header{}, 200),
			overHTTP(b, e.noCache, "/v1/views/orders/order-0007", http.Header{}, 200))
	})
	b.Run("cached", func(b *testing.B) {
		ab(b, func(n int) time.Duration { return serve(b, raw, req, 200, n) },
			func(n int) time.Duration { return serve(b, e.srv, req, 200, n) })
	})
}

// BenchmarkList50: a page of 50 documents against echo doing the same Find (filter, sort,
// limit) and encoding []bson.M.
func BenchmarkList50(b *testing.B) {
	e := newBenchEnv(b)
	raw := rawEcho("/v1/views/:view", func(c echo.Context) error {
		cur, err := e.coll.Find(c.Request().Context(), bson.D{{Key: "status", Value: "paid"}},
			options.Find().SetSort(bson.D{{Key: "created", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(51))
		if err != nil {
			return err
		}
		var items []bson.M
		if err := cur.All(c.Request().Context(), &items); err != nil {
			return err
		}
		return c.JSON(200, map[string]any{"items": items[:50]})
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/views/orders?status=eq.paid&order=created.desc&limit=50", nil)
	ab(b, func(n int) time.Duration { return serve(b, raw, req, 200, n) },
		func(n int) time.Duration { return serve(b, e.srv, req, 200, n) })
}
