package snapshotapi_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetbus/jetbus/snapshotapi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

var nextLinkPattern = regexp.MustCompile(`^<(/v1/views/[^>]+)>; rel="next"$`)

// TestPagingUnderWrites walks a view of pagingDocs documents (3,000; 10,000 in make
// test-long) page by page, following Link rel="next", while documents are updated, inserted
// and deleted between pages: every key that existed throughout the walk comes back exactly
// once, in order, whatever the order and filter.
func TestPagingUnderWrites(t *testing.T) {
	n := pagingDocs
	if testing.Short() {
		n = 2000
	}
	a := newAPI(t, false)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stableDoc := func(i int) bson.D {
		return doc(fmt.Sprintf("k%05d", i), 1, base, bson.D{
			{Key: "created", Value: bson.NewDateTimeFromTime(base.Add(time.Duration(i/3) * time.Second))}, // ties of three
			{Key: "rank", Value: int64(i % 97)},
			{Key: "paid", Value: i%2 == 0},
			{Key: "status", Value: "open"},
		})
	}
	var batch []any
	flush := func() {
		if len(batch) > 0 {
			_, err := a.db.Collection("orders").InsertMany(ctx, batch)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
	for i := range n {
		batch = append(batch, stableDoc(i))
		if len(batch) == 1000 {
			flush()
		}
	}
	doomed := n / 10 // existed at the start, deleted during the walk
	for i := range doomed {
		batch = append(batch, doc(fmt.Sprintf("d%05d", i), 1, base, bson.D{
			{Key: "created", Value: bson.NewDateTimeFromTime(base.Add(time.Duration(rand.IntN(n/3)) * time.Second))},
			{Key: "rank", Value: int64(rand.IntN(97))}, {Key: "paid", Value: true}, {Key: "status", Value: "open"},
		}))
	}
	flush()

	walks := []struct {
		name, query string
		sortKey     func(item map[string]any) string
		desc        bool
		stable      func(i int) bool
	}{
		{"by _id", "limit=100", nil, false, func(int) bool { return true }},
		{"by created with ties", "order=created.asc&limit=100", func(m map[string]any) string { return m["created"].(string) }, false, func(int) bool { return true }},
		{"by created, descending", "order=created.desc&limit=97", func(m map[string]any) string { return m["created"].(string) }, true, func(int) bool { return true }},
		{"by rank, descending, filtered", "paid=eq.true&order=rank.desc&limit=100", func(m map[string]any) string { return fmt.Sprintf("%03.0f", m["rank"].(float64)) }, true, func(i int) bool { return i%2 == 0 }},
	}
	inserted := 0
	for _, w := range walks {
		t.Run(w.name, func(t *testing.T) {
			seen := map[string]int{}
			var lastKey string
			path := "/v1/views/orders?" + w.query
			pages := 0
			for path != "" {
				r := a.get(path)
				require.Equal(t, 200, r.StatusCode, "%s: %s", path, r.body)
				pages++
				for _, it := range r.json(t)["items"].([]any) {
					m := it.(map[string]any)
					id := m["_id"].(string)
					seen[id]++
					if w.sortKey != nil {
						k := w.sortKey(m) + "\x00" + id
						if lastKey != "" {
							if w.desc {
								require.Less(t, k, lastKey, "out of order")
							} else {
								require.Greater(t, k, lastKey, "out of order")
							}
						}
						lastKey = k
					}
				}
				path = ""
				if link := r.Header.Get("Link"); link != "" {
					m := nextLinkPattern.FindStringSubmatch(link)
					require.NotNil(t, m, "Link: %s", link)
					path = m[1]
				}
				// Writes land between pages: updates of stable documents (not of their order
				// fields), new documents anywhere in the order, deletions of doomed ones.
				for range 10 {
					i := rand.IntN(n)
					_, err := a.db.Collection("orders").UpdateOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("k%05d", i)}},
						bson.D{{Key: "$inc", Value: bson.D{{Key: "_v", Value: 1}}}, {Key: "$set", Value: bson.D{{Key: "status", Value: "changed"}}}})
					require.NoError(t, err)
				}
				for range 5 {
					inserted++
					a.put("orders", doc(fmt.Sprintf("n%05d", inserted), 1, base, bson.D{
						{Key: "created", Value: bson.NewDateTimeFromTime(base.Add(time.Duration(rand.IntN(n/3)) * time.Second))},
						{Key: "rank", Value: int64(rand.IntN(97))}, {Key: "paid", Value: rand.IntN(2) == 0},
					}))
				}
				_, err := a.db.Collection("orders").DeleteOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("d%05d", rand.IntN(doomed))}})
				require.NoError(t, err)
			}
			for id, c := range seen {
				require.Equal(t, 1, c, "%s seen %d times", id, c)
			}
			missing := 0
			for i := range n {
				if w.stable(i) && seen[fmt.Sprintf("k%05d", i)] != 1 {
					missing++
				}
			}
			assert.Zero(t, missing, "stable keys not returned exactly once")
			t.Logf("%d pages, %d keys", pages, len(seen))
		})
	}
}

// TestCursorHidesTheOrderField: a view whose fields hide the order field pages by it, and
// the cursor it hands out does not carry that field's value in the clear.
func TestCursorHidesTheOrderField(t *testing.T) {
	a := newAPI(t, false) // serves slim, whose fields hide rank
	for i, secret := range []string{"hidden-rank-alpha", "hidden-rank-bravo", "hidden-rank-charlie"} {
		a.put("orders", doc(fmt.Sprintf("k%d", i), 1, t0, bson.D{{Key: "rank", Value: secret}, {Key: "status", Value: "open"}}))
	}
	r := a.get("/v1/views/slim?order=rank.asc&limit=1")
	require.Equal(t, 200, r.StatusCode, string(r.body))
	assert.NotContains(t, string(r.body), "hidden-rank", "the field is not served")
	m := nextLinkPattern.FindStringSubmatch(r.Header.Get("Link"))
	require.Len(t, m, 2, "a next page")
	u, err := url.Parse(m[1])
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(u.Query().Get("cursor"))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "hidden-rank", "the cursor does not carry the hidden value in the clear")
	r = a.get(m[1])
	require.Equal(t, 200, r.StatusCode, "the cursor still pages")
	assert.Equal(t, []string{"k1"}, ids(t, r))
}

// TestPageByteBudget: a page ends early, with its next link, when its documents would pass
// MaxPageBytes; walking the links still returns every document once.
func TestPageByteBudget(t *testing.T) {
	a := newAPI(t, false, withConfig(func(c *snapshotapi.Config) { c.MaxPageBytes = 1 << 20 }))
	big := strings.Repeat("x", 300<<10)
	for i := range 5 {
		a.put("orders", doc(fmt.Sprintf("k%d", i), 1, t0, bson.D{{Key: "note", Value: big}}))
	}
	var got []string
	path := "/v1/views/orders?limit=5"
	pages := 0
	for path != "" {
		r := a.get(path)
		require.Equal(t, 200, r.StatusCode)
		page := ids(t, r)
		assert.LessOrEqual(t, len(page)*len(big), 1<<20, "a page stays within its budget")
		assert.NotEmpty(t, page)
		got = append(got, page...)
		pages++
		path = ""
		if m := nextLinkPattern.FindStringSubmatch(r.Header.Get("Link")); m != nil {
			path = m[1]
		}
	}
	assert.Equal(t, []string{"k0", "k1", "k2", "k3", "k4"}, got)
	assert.Greater(t, pages, 1, "the budget cut the page")
}
