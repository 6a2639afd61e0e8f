package snapshotapi

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func testView() *view {
	v := View{Name: "orders", Projection: "orders-view", Topic: "orders", Partitions: 4, Collection: "orders",
		Filters: map[string]FieldType{"status": String, "total": Number, "paid": Bool, "created": Time, "customer.id": String},
		Sort:    []string{"created", "customer.id"}, MaxLimit: 50}
	return &view{View: v, filterNames: []string{"created", "customer.id", "paid", "status", "total"}}
}

func ext(t *testing.T, d any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(d, true, false)
	require.NoError(t, err)
	return string(b)
}

func TestParseListParams(t *testing.T) {
	cases := []struct {
		name   string
		query  string
		filter []string // extended JSON of each condition's filter
		order  string
		limit  int
	}{
		{"defaults", "", nil, "_id.asc", 50},
		{"eq string", "status=eq.paid", []string{`{"status":{"$eq":"paid"}}`}, "_id.asc", 50},
		{"integer stays an integer", "total=gt.10", []string{`{"total":{"$gt":{"$numberLong":"10"}}}`}, "_id.asc", 50},
		{"float", "total=lte.9.5", []string{`{"total":{"$lte":{"$numberDouble":"9.5"}}}`}, "_id.asc", 50},
		{"exponent is a double", "total=eq.1e3", []string{`{"total":{"$eq":{"$numberDouble":"1000.0"}}}`}, "_id.asc", 50},
		{"beyond int64 is a double", "total=eq.9223372036854775808", []string{`{"total":{"$eq":{"$numberDouble":"9.223372036854776E+18"}}}`}, "_id.asc", 50},
		{"bool", "paid=ne.true", []string{`{"paid":{"$ne":true}}`}, "_id.asc", 50},
		{"in with quotes", `status=in.(a,"b,c","d\"e")`, []string{`{"status":{"$in":["a","b,c","d\"e"]}}`}, "_id.asc", 50},
		{"prefix escapes the pattern", "status=prefix.a.b*(", []string{`{"status":{"$regex":{"$regularExpression":{"pattern":"^a\\.b\\*\\(","options":""}}}}`}, "_id.asc", 50},
		{"dotted declared field", "customer.id=eq.c7", []string{`{"customer.id":{"$eq":"c7"}}`}, "_id.asc", 50},
		{"range on one field", "total=gt.1&total=lt.5", []string{`{"total":{"$gt":{"$numberLong":"1"}}}`, `{"total":{"$lt":{"$numberLong":"5"}}}`}, "_id.asc", 50},
		{"time eq matches date or string", "created=eq.2026-01-02T03:04:05Z",
			[]string{`{"created":{"$in":[{"$date":{"$numberLong":"1767323045000"}},"2026-01-02T03:04:05Z"]}}`}, "_id.asc", 50},
		{"time from Unix ms", "created=gt.1767323045000",
			[]string{`{"$or":[{"created":{"$gt":{"$date":{"$numberLong":"1767323045000"}}}},{"created":{"$gt":"2026-01-02T03:04:05.000Z"}}]}`}, "_id.asc", 50},
		{"order and limit", "order=created.desc&limit=7", nil, "created.desc", 7},
		{"order by a dotted field", "order=customer.id.asc", nil, "customer.id.asc", 50},
		{"empty pairs are skipped", "&&status=eq.x&", []string{`{"status":{"$eq":"x"}}`}, "_id.asc", 50},
		{"encoded value", "status=eq.a%20b%26c", []string{`{"status":{"$eq":"a b&c"}}`}, "_id.asc", 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params, e := splitQuery(tc.query, 4096)
			require.Nil(t, e)
			lp, e := parseListParams(params, testView(), 10*time.Second)
			require.Nil(t, e, "%v", e)
			var got []string
			for _, c := range lp.conds {
				got = append(got, ext(t, c.filter()))
			}
			assert.Equal(t, tc.filter, got)
			assert.Equal(t, tc.order, lp.order.String())
			assert.Equal(t, tc.limit, lp.limit)
		})
	}
}

func TestParseReadParams(t *testing.T) {
	params, e := splitQuery("after=0:5,3:9&wait=250ms&meta=true", 4096)
	require.Nil(t, e)
	rp, e := parseKeyParams(params, testView(), 10*time.Second)
	require.Nil(t, e)
	assert.Equal(t, []position{{0, 5}, {3, 9}}, rp.after)
	assert.Equal(t, 250*time.Millisecond, rp.wait)
	assert.True(t, rp.meta)

	params, _ = splitQuery("at=1767323045123", 4096)
	rp, e = parseKeyParams(params, testView(), 10*time.Second)
	require.Nil(t, e)
	assert.Equal(t, time.UnixMilli(1767323045123).UTC(), rp.at)
}

func TestBindingIgnoresParameterOrder(t *testing.T) {
	parse := func(q string) listParams {
		params, _ := splitQuery(q, 4096)
		lp, e := parseListParams(params, testView(), time.Second)
		require.Nil(t, e)
		return lp
	}
	a := parse("status=eq.a&total=gt.1&limit=5")
	b := parse("total=gt.1&limit=9&status=eq.a")
	assert.Equal(t, a.binding("orders"), b.binding("orders"), "limit and parameter order do not matter")
	assert.NotEqual(t, a.binding("orders"), parse("status=eq.b&total=gt.1").binding("orders"))
	assert.NotEqual(t, a.binding("orders"), a.binding("slim"))
	assert.NotEqual(t, a.binding("orders"), parse("status=eq.a&total=gt.1&order=created.asc").binding("orders"))
}

func TestCursorRoundTrip(t *testing.T) {
	codec := newCursorCodec([]byte(strings.Repeat("s", 32)))
	var binding [16]byte
	binding[0] = 9
	for _, v := range []any{"x", int64(42), 2.5, true, bson.NewDateTimeFromTime(time.UnixMilli(5)), nil} {
		doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "k/é"}, {Key: "f", Value: v}})
		require.NoError(t, err)
		ks, ok := keysetOf(doc, order{field: "f"})
		require.True(t, ok)
		s := codec.encode(binding, ks)
		got, e := codec.decode(s, binding)
		require.Nil(t, e)
		assert.Equal(t, ks.id, got.id)
		assert.Equal(t, ks.value.Type, got.value.Type)
		assert.Equal(t, []byte(ks.value.Value), []byte(got.value.Value))
		_, e = codec.decode(s, [16]byte{})
		require.NotNil(t, e, "another binding")
		_, e = newCursorCodec([]byte(strings.Repeat("t", 32))).decode(s, binding)
		require.NotNil(t, e, "another key")
	}
}

func TestKeysetAfterFollowsSortBrackets(t *testing.T) {
	num := keyset{value: rawOf(t, int64(5)), id: "k"}
	assert.Equal(t,
		`{"$or":[{"f":{"$gt":{"$numberLong":"5"}}},{"f":{"$eq":{"$numberLong":"5"}},"_id":{"$gt":"k"}},{"f":{"$type":["string","symbol","object","array","binData","objectId","bool","date","timestamp","regex","maxKey"]}}]}`,
		ext(t, num.after(order{field: "f"})))
	assert.Equal(t,
		`{"$or":[{"f":{"$lt":{"$numberLong":"5"}}},{"f":{"$eq":{"$numberLong":"5"}},"_id":{"$lt":"k"}},{"f":null},{"f":{"$type":["minKey"]}}]}`,
		ext(t, num.after(order{field: "f", desc: true})))
	null := keyset{value: bson.RawValue{Type: bson.TypeNull}, id: "k"}
	assert.Equal(t,
		`{"$or":[{"f":null,"_id":{"$gt":"k"}},{"f":{"$type":["double","int","long","decimal","string","symbol","object","array","binData","objectId","bool","date","timestamp","regex","maxKey"]}}]}`,
		ext(t, null.after(order{field: "f"})))
	assert.Equal(t, `{"_id":{"$gt":"k"}}`, ext(t, null.after(order{field: "_id"})))
}

func rawOf(t *testing.T, v any) bson.RawValue {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	require.NoError(t, err)
	return bson.Raw(doc).Lookup("v")
}

func TestRenderTypes(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("65f1a2b3c4d5e6f708192a3b")
	d, err := bson.Marshal(bson.D{
		{Key: "_id", Value: "k"}, {Key: "_v", Value: int64(3)}, {Key: "_ts", Value: bson.DateTime(1767323045123)},
		{Key: "_topic", Value: "orders"}, {Key: "s", Value: "a\"b\\c\n\x01é"}, {Key: "i", Value: int32(-7)},
		{Key: "f", Value: 1e21}, {Key: "g", Value: 0.000001}, {Key: "h", Value: 1e-7}, {Key: "b", Value: false}, {Key: "n", Value: nil},
		{Key: "o", Value: oid}, {Key: "bin", Value: bson.Binary{Data: []byte{1, 2}}},
		{Key: "arr", Value: bson.A{int64(1), "x", bson.D{{Key: "z", Value: true}}}},
		{Key: "sub", Value: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 2}}},
	})
	require.NoError(t, err)
	assert.Equal(t,
		`{"_id":"k","s":"a\"b\\c\n\u0001é","i":-7,"f":1e+21,"g":0.000001,"h":1e-7,"b":false,"n":null,"o":"65f1a2b3c4d5e6f708192a3b","bin":"AQI=","arr":[1,"x",{"z":true}],"sub":{"a":1,"b":2}}`,
		string(appendDoc(nil, d, renderOpts{})))
	assert.Equal(t, `{"_id":"k","_v":3,"_ts":"2026-01-02T03:04:05.123Z","s":"a\"b\\c\n\u0001é"}`,
		string(appendDoc(nil, d, renderOpts{meta: true, fields: newFieldSet([]string{"s"})})))
	// As MongoDB projects a dotted path: into documents, also inside arrays; other values drop.
	assert.Equal(t, `{"_id":"k","arr":[{}],"sub":{"b":2}}`,
		string(appendDoc(nil, d, renderOpts{fields: newFieldSet([]string{"sub.b", "arr.q", "s.x"})})))
	bad, _ := bson.Marshal(bson.D{{Key: "s", Value: "\xff"}})
	assert.Equal(t, `{"_id":"x","s":"\ufffd"}`, string(appendDoc(nil, bad, renderOpts{id: "x"})))
}
