package snapshotapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// sseEvent is one block of a text/event-stream, as the WHATWG parser reads it.
type sseEvent struct {
	id, event, data string
	hasID           bool
	comments        []string
}

// payload decodes an upsert's or delete's data.
type payload struct {
	Key string          `json:"key"`
	V   *int64          `json:"v"`
	Doc json.RawMessage `json:"doc"`
}

func (e sseEvent) payload(t *testing.T) payload {
	t.Helper()
	var p payload
	require.NoError(t, json.Unmarshal([]byte(e.data), &p), "data: %s", e.data)
	return p
}

// stream is a watch under way: its response and its events as they arrive.
type stream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
	done   chan error
	cancel context.CancelFunc
	lastID string    // the last id received (as EventSource keeps it)
	body   io.Reader // a paused stream's body
}

// watch opens GET path (a watch), with headers as name, value pairs, and fails unless it
// answers 200 text/event-stream.
func (a *api) watch(path string, headers ...string) *stream {
	a.t.Helper()
	s, res := a.openWatch(path, headers...)
	require.Equal(a.t, http.StatusOK, res.StatusCode)
	return s
}

// openWatch opens a watch; on a status other than 200 it returns the response, body read.
func (a *api) openWatch(path string, headers ...string) (*stream, response) {
	t := a.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.http.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := plainTransport.RoundTrip(req)
	require.NoError(t, err)
	if res.StatusCode != http.StatusOK {
		defer cancel()
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		r := response{res, body}
		validateError(t, a.spec(), r)
		return nil, r
	}
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &stream{t: t, resp: res, events: make(chan sseEvent, 100000), done: make(chan error, 1), cancel: cancel}
	go s.read(res.Body)
	t.Cleanup(s.close)
	return s, response{res, nil}
}

// read parses the stream into events.
func (s *stream) read(body io.Reader) {
	r := bufio.NewReaderSize(body, 1<<16)
	var cur sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			s.done <- err
			close(s.events)
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			s.events <- cur
			cur = sseEvent{}
			continue
		}
		if c, ok := strings.CutPrefix(line, ":"); ok {
			cur.comments = append(cur.comments, strings.TrimPrefix(c, " "))
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			cur.id, cur.hasID = value, true
		case "event":
			cur.event = value
		case "data":
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data += value
		}
	}
}

func (s *stream) close() {
	s.cancel()
	if s.resp != nil {
		_ = s.resp.Body.Close()
	}
}

// next returns the next block with an event (comment-only blocks are skipped, but their
// ids kept), failing after 10 s.
func (s *stream) next() sseEvent {
	s.t.Helper()
	for {
		e := s.block(10 * time.Second)
		if e.event != "" {
			return e
		}
	}
}

// block returns the next block of any kind; it fails when none comes within d.
func (s *stream) block(d time.Duration) sseEvent {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatalf("the stream ended: %v", <-s.done)
		}
		if e.hasID {
			s.lastID = e.id
		}
		return e
	case <-time.After(d):
		s.t.Fatalf("no event within %s", d)
	}
	return sseEvent{}
}

// ended reports whether the server ended the stream, waiting at most d.
func (s *stream) ended(d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				return true
			}
			if e.hasID {
				s.lastID = e.id
			}
		case <-deadline:
			return false
		}
	}
}

// version of an event's payload (-1 without one).
func (p payload) version() int64 {
	if p.V == nil {
		return -1
	}
	return *p.V
}

// set writes version v of key as a changelog projection does: one update pipeline that
// replaces the document unless the stored one is at v or later (docs/views.md).
func (a *api) set(coll, key string, v int64, fields bson.D) {
	a.t.Helper()
	d := append(bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: v}, {Key: "_ts", Value: bson.NewDateTimeFromTime(t0)}, {Key: "_topic", Value: "orders"}}, fields...)
	a.guarded(coll, key, v, d)
}

// tombstone writes version v of key as a deletion marker (tombstones: keep).
func (a *api) tombstone(coll, key string, v int64) {
	a.t.Helper()
	a.guarded(coll, key, v, bson.D{{Key: "_id", Value: key}, {Key: "_v", Value: v}, {Key: "_ts", Value: bson.NewDateTimeFromTime(t0)},
		{Key: "_topic", Value: "orders"}, {Key: "_deleted", Value: true}})
}

func (a *api) guarded(coll, key string, v int64, d bson.D) {
	a.t.Helper()
	pipeline := bson.A{bson.D{{Key: "$replaceWith", Value: bson.D{{Key: "$cond", Value: bson.D{
		{Key: "if", Value: bson.D{{Key: "$lt", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$_v", int64(-1)}}}, v}}}},
		{Key: "then", Value: bson.D{{Key: "$literal", Value: d}}},
		{Key: "else", Value: "$$ROOT"},
	}}}}}}
	_, err := a.db.Collection(coll).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: key}}, pipeline, options.UpdateOne().SetUpsert(true))
	require.NoError(a.t, err)
}

// remove deletes key's document from the collection (a marker expiring).
func (a *api) remove(coll, key string) {
	a.t.Helper()
	_, err := a.db.Collection(coll).DeleteOne(context.Background(), bson.D{{Key: "_id", Value: key}})
	require.NoError(a.t, err)
}

// rawConn opens a watch over a raw TCP connection to a server of the API whose sockets
// have a small send buffer, so that a test can stop reading and make the server's writes
// wait soon.
func (a *api) rawConn(path string, headers ...string) (net.Conn, *bufio.Reader) {
	a.t.Helper()
	if a.slow == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(a.t, err)
		a.slow = httptest.NewUnstartedServer(a.srv)
		a.slow.Listener = smallSendBuffers{ln}
		a.slow.Start()
		a.t.Cleanup(a.slow.Close)
	}
	addr := strings.TrimPrefix(a.slow.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	require.NoError(a.t, err)
	a.t.Cleanup(func() { _ = conn.Close() })
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n"
	for i := 0; i+1 < len(headers); i += 2 {
		req += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	_, err = conn.Write([]byte(req + "\r\n"))
	require.NoError(a.t, err)
	br := bufio.NewReaderSize(conn, 1<<16)
	res, err := http.ReadResponse(br, nil)
	require.NoError(a.t, err)
	require.Equal(a.t, http.StatusOK, res.StatusCode)
	return conn, bufio.NewReader(res.Body)
}

type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	}
	return c, err
}
