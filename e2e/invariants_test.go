package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jetbus/jetbus"
	"github.com/jetbus/jetbus/dlq"
	"github.com/jetbus/jetbus/internal/streamscan"
	"github.com/jetbus/jetbus/projection"
)

// stored is one message of a topic's stream.
type stored struct {
	ID      string
	Key     string
	Seq     uint64
	Subject string
	Data    json.RawMessage
}

// scanStream reads every message of stream (as the admin user: the test's own reads).
func (s *stack) scanStream(t *testing.T, stream string) []stored {
	t.Helper()
	nc := s.connect(t, userAdmin)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []stored
	err = streamscan.Scan(ctx, js, stream, natsjs.OrderedConsumerConfig{}, func(m natsjs.Msg, md *natsjs.MsgMetadata) bool {
		h := m.Headers()
		out = append(out, stored{ID: h.Get(jetbus.HeaderMsgID), Key: h.Get(jetbus.HeaderKey), Seq: md.Sequence.Stream,
			Subject: m.Subject(), Data: append(json.RawMessage(nil), m.Data()...)})
		if id := h.Get(dlq.HeaderOriginalID); id != "" {
			out[len(out)-1].ID = id
		}
		return true
	})
	require.NoError(t, err, "scan stream %s", stream)
	return out
}

// checkTopic: every acknowledged event is in the topic exactly once, at the sequence its
// client was told (nothing acknowledged was lost); no ID is stored twice; an event given up
// by its client is stored at most once.
func checkTopic(t *testing.T, msgs []stored, l *ledger) {
	t.Helper()
	count := map[string]int{}
	bySeq := map[uint64]string{}
	for _, m := range msgs {
		count[m.ID]++
		bySeq[m.Seq] = m.ID
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, twice := 0, 0
	for id, a := range l.acked {
		switch n := count[id]; {
		case n == 0:
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged event %s (partition %d, seq %d) is not in the topic", id, a.Partition, a.Seq)
			}
		case n > 1:
			twice++
			if twice <= 5 {
				t.Errorf("acknowledged event %s is in the topic %d times", id, n)
			}
		default:
			assert.Equal(t, id, bySeq[a.Seq], "the client of %s was told seq %d", id, a.Seq)
		}
	}
	for id, n := range count {
		assert.LessOrEqual(t, n, 1, "event %s stored %d times", id, n)
	}
	for id := range l.failed {
		assert.LessOrEqual(t, count[id], 1, "event %s (given up by its client) stored %d times", id, count[id])
	}
	assert.Zero(t, lost, "acknowledged events lost")
	assert.Zero(t, twice, "acknowledged events stored more than once")
}

// fold is the state a changelog view must hold: the last event of each key, in stream order.
// A tombstone (payload null) removes the key.
func fold(msgs []stored) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, m := range msgs {
		if string(m.Data) == "null" {
			delete(out, m.Key)
			continue
		}
		var doc map[string]any
		if json.Unmarshal(m.Data, &doc) != nil {
			continue // not a document: it must be in the DLQ instead (checkDLQ)
		}
		out[m.Key] = doc
	}
	return out
}

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// readView lists a view over HTTP, following the next links, keyed by _id; internal fields
// (starting with _) are dropped.
func readView(p *proc, view string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	path := "/v1/views/" + view + "?limit=100"
	for path != "" {
		resp, err := httpClient.Get(p.url(path))
		if err != nil {
			return nil, err
		}
		var body struct {
			Items []map[string]any `json:"items"`
			Data  []map[string]any `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return nil, fmt.Errorf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		for _, d := range append(body.Items, body.Data...) {
			id, _ := d["_id"].(string)
			maps.DeleteFunc(d, func(k string, _ any) bool { return strings.HasPrefix(k, "_") })
			out[id] = d
		}
		path = ""
		if m := nextLink.FindStringSubmatch(resp.Header.Get("Link")); m != nil {
			path = m[1]
			if i := strings.Index(path, "/v1/"); i > 0 {
				path = path[i:]
			}
		}
	}
	return out, nil
}

// checkView: the view, read over HTTP from every running projector, equals the fold of its
// topic (within the deadline: the projectors catch up).
func (s *stack) checkView(t *testing.T, view string, msgs []stored) {
	t.Helper()
	want := fold(msgs)
	// Through JSON, so numbers compare as they come over HTTP.
	b, _ := json.Marshal(want)
	want = nil
	require.NoError(t, json.Unmarshal(b, &want))
	var got map[string]map[string]any
	var err error
	ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
		for _, p := range s.running("projector") {
			if got, err = readView(p, view); err != nil || !equalJSON(got, want) {
				return false
			}
		}
		return true
	})
	assert.True(t, ok, "view %s equals the fold of its topic within 60s: read error %v; %s", view, err, diff(want, got))
}

func equalJSON(a, b map[string]map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// diff says, briefly, where two views differ.
func diff(want, got map[string]map[string]any) string {
	var missing, extra, wrong []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case !equalJSON(map[string]map[string]any{k: w}, map[string]map[string]any{k: g}):
			wrong = append(wrong, fmt.Sprintf("%s: want %v got %v", k, w, g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	cut := func(s []string) []string { slices.Sort(s); return s[:min(len(s), 5)] }
	return fmt.Sprintf("%d keys wanted, %d read; missing %d %v; extra %d %v; different %d %v",
		len(want), len(got), len(missing), cut(missing), len(extra), cut(extra), len(wrong), cut(wrong))
}

// checkDLQ: the DLQ holds exactly the events made to fail — messages ingress refused — each
// once, under dlq_rejects.<topic> in the refusals' stream, and nothing else.
func (s *stack) checkDLQ(t *testing.T, l *ledger) {
	t.Helper()
	l.mu.Lock()
	want := slices.Sorted(maps.Keys(l.bad))
	l.mu.Unlock()
	var got []string
	poll(30*time.Second, 200*time.Millisecond, func() bool {
		got = got[:0]
		for _, stream := range []string{dlq.StreamName, dlq.RejectsStreamName} {
			for _, m := range s.scanStream(t, stream) {
				got = append(got, m.Subject+" "+m.ID)
			}
		}
		slices.Sort(got)
		return len(got) >= len(want)
	})
	wantSubj := make([]string, len(want))
	for i, id := range want {
		wantSubj[i] = dlq.RejectsSubjectPrefix + "orders " + id
	}
	assert.Equal(t, wantSubj, got, "the DLQ holds exactly the events made to fail")
}

// checkCustomers: the changefeed's source collection, its topic's fold and the customers view
// hold the same documents.
func (s *stack) checkCustomers(t *testing.T) {
	t.Helper()
	src := s.customers(t)
	var msgs []stored
	var got map[string]map[string]any
	ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
		msgs = s.scanStream(t, "customers")
		got = docsByKey(fold(msgs))
		return equalJSON(got, src)
	})
	require.True(t, ok, "the customers topic folds to the collection: %s", diff(src, got))
	s.checkView(t, "customers", msgs)
}

// docsByKey drops internal fields.
func docsByKey(m map[string]map[string]any) map[string]map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]map[string]any
	_ = json.Unmarshal(b, &out)
	for _, d := range out {
		maps.DeleteFunc(d, func(k string, _ any) bool { return strings.HasPrefix(k, "_") })
	}
	return out
}

// mongoClient connects to the backend.
func (s *stack) mongoClient(t *testing.T) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(s.mongoURI()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// customers reads the source collection of the changefeed, keyed by _id as a string.
func (s *stack) customers(t *testing.T) map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur, err := s.mongoClient(t).Database(s.db).Collection("customers").Find(ctx, bson.D{})
	require.NoError(t, err)
	var docs []bson.M
	require.NoError(t, cur.All(ctx, &docs))
	out := map[string]map[string]any{}
	for _, d := range docs {
		b, err := bson.MarshalExtJSON(d, false, false)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		id := fmt.Sprint(d["_id"])
		maps.DeleteFunc(m, func(k string, _ any) bool { return strings.HasPrefix(k, "_") })
		out[id] = m
	}
	return out
}

// checkCounts: the transactional view of examples/counter holds, for every key, the number of
// its events in the topic, and in all the number of events: each event counted exactly once
// across SIGKILLs, restarts and MongoDB faults.
func (s *stack) checkCounts(t *testing.T, msgs []stored) {
	t.Helper()
	want := map[string]int64{"all": int64(len(msgs))}
	for _, m := range msgs {
		want["key:"+m.Key]++
	}
	got := map[string]int64{}
	c := s.mongoClient(t).Database(s.db).Collection("order_counts")
	var err error
	ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cur *mongo.Cursor
		if cur, err = c.Find(ctx, bson.D{}); err != nil {
			return false
		}
		var docs []struct {
			ID string `bson:"_id"`
			N  int64  `bson:"n"`
		}
		if err = cur.All(ctx, &docs); err != nil {
			return false
		}
		clear(got)
		for _, d := range docs {
			got[d.ID] = d.N
		}
		return maps.Equal(got, want)
	})
	if !ok {
		var wrong []string
		for k, n := range want {
			if got[k] != n {
				wrong = append(wrong, fmt.Sprintf("%s: %d counted, %d events", k, got[k], n))
			}
		}
		for k, n := range got {
			if _, ok := want[k]; !ok {
				wrong = append(wrong, fmt.Sprintf("%s: %d counted, no events", k, n))
			}
		}
		slices.Sort(wrong)
		t.Errorf("the counts equal the events within 60s (read error %v): %d differ, e.g. %v", err, len(wrong), wrong[:min(len(wrong), 5)])
		s.logGroup(t, "orders", counterGroup, msgs)
	}
}

// counterGroup is the group (and projection name) of examples/counter on the stack.
const counterGroup = "orders-counts"

// logGroup logs, for each partition of topic, the last stream sequence the topic holds there,
// the server's view of group's consumer and the group's checkpoint, so that a view found
// behind can be told apart: deliveries the server no longer counts as pending (ack floor
// short of the delivered sequence), deliveries held unacknowledged, or a checkpoint that moved
// without the view.
func (s *stack) logGroup(t *testing.T, topic, group string, msgs []stored) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := map[int]uint64{}
	for _, m := range msgs {
		if _, p, _, ok := jetbus.ParseSubject(m.Subject); ok {
			last[p] = max(last[p], m.Seq)
		}
	}
	js, err := natsjs.New(s.connect(t, userAdmin))
	require.NoError(t, err)
	db := s.mongoClient(t).Database(s.db)
	for p := 0; ; p++ { // up to the first partition without a consumer
		c, err := js.Consumer(ctx, jetbus.StreamName(topic), jetbus.ConsumerName(group, p))
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			return
		}
		cp, cerr := projection.ReadCheckpoint(ctx, db, group, topic, p)
		if err != nil {
			t.Logf("partition %d: topic ends at %d; consumer: %v; checkpoint %d (%v)", p, last[p], err, cp, cerr)
			return // the server does not answer: the next partitions would not either
		}
		i := c.CachedInfo()
		t.Logf("partition %d: topic ends at %d; consumer delivered %+v, ack floor %+v, ack pending %d, redelivered %d, pending %d, waiting %d, pin %+v; checkpoint %d (%v)",
			p, last[p], i.Delivered, i.AckFloor, i.NumAckPending, i.NumRedelivered, i.NumPending, i.NumWaiting, i.PriorityGroups, cp, cerr)
	}
}

// checkAll runs every invariant after a scenario.
func (s *stack) checkAll(t *testing.T, l *ledger) {
	t.Helper()
	msgs := s.scanStream(t, "orders")
	checkTopic(t, msgs, l)
	s.checkView(t, "orders", msgs)
	s.checkCounts(t, msgs)
	s.checkDLQ(t, l)
	s.checkNoViolations(t)
	a, f, b := l.counts()
	t.Logf("invariants over %d acknowledged events (%d given up by their client, %d made to fail), %d stored", a, f, b, len(msgs))
}

var _ = nats.Connect
