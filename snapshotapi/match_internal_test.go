package snapshotapi

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/jetbus/jetbus/embeddedtest"
)

// TestWatchFilterAgreesWithFind: for random documents and random filters of the query
// grammar, the filter a watch applies in memory matches exactly the documents the
// deployment's find matches with the list's filter.
func TestWatchFilterAgreesWithFind(t *testing.T) {
	db := embeddedtest.Mongo(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 27))
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	pick := func(vals ...any) any { return vals[rng.IntN(len(vals))] }
	str := func() any { return pick("open", "paid", "pa", "paid,late", "", "Paid", "shipped") }
	num := func() any {
		return pick(int32(5), int64(5), 5.0, 5.5, int64(-3), math.NaN(), bson.NewDecimal128(0, 50), int64(math.MaxInt64), 1e300, "5")
	}
	date := func() any {
		return pick(bson.NewDateTimeFromTime(t0), bson.NewDateTimeFromTime(t0.Add(time.Hour)), "2026-03-01T10:00:00.000Z", "2026-03-01T11:00:00.000Z", "x")
	}
	var docs []any
	for i := range 300 {
		d := bson.D{{Key: "_id", Value: fmt.Sprintf("d%03d", i)}}
		add := func(k string, v func() any) {
			switch rng.IntN(6) {
			case 0: // missing
			case 1:
				d = append(d, bson.E{Key: k, Value: nil})
			case 2:
				d = append(d, bson.E{Key: k, Value: bson.A{v(), v()}})
			default:
				d = append(d, bson.E{Key: k, Value: v()})
			}
		}
		add("status", str)
		add("total", num)
		add("paid", func() any { return pick(true, false, "true") })
		add("created", date)
		switch rng.IntN(4) {
		case 0:
			d = append(d, bson.E{Key: "customer", Value: bson.D{{Key: "id", Value: str()}}})
		case 1:
			d = append(d, bson.E{Key: "customer", Value: bson.A{bson.D{{Key: "id", Value: str()}}, bson.D{{Key: "id", Value: str()}}}})
		case 2:
			d = append(d, bson.E{Key: "customer", Value: str()})
		}
		docs = append(docs, d)
	}
	_, err := db.Collection("docs").InsertMany(ctx, docs)
	require.NoError(t, err)

	fields := map[string]FieldType{"status": String, "total": Number, "paid": Bool, "created": Time, "customer.id": String}
	values := map[FieldType][]string{
		String: {"paid", "pa", "open", "", "zzz"},
		Number: {"5", "5.5", "-3", "0", "9223372036854775807", "1e300", "5.0"},
		Bool:   {"true", "false"},
		Time:   {t0.Format(time.RFC3339), fmt.Sprint(t0.UnixMilli()), t0.Add(30 * time.Minute).Format(time.RFC3339)},
	}
	names := []string{"status", "total", "paid", "created", "customer.id"}
	for range 400 {
		f := names[rng.IntN(len(names))]
		typ := fields[f]
		op := opNames[rng.IntN(len(opNames))]
		if op == "prefix" && typ != String {
			op = "eq"
		}
		val := values[typ][rng.IntN(len(values[typ]))]
		if op == "in" {
			val = "(" + val + "," + values[typ][rng.IntN(len(values[typ]))] + ")"
		}
		c, e := parseCondition(f, typ, op+"."+val)
		require.Nil(t, e, "%s=%s.%s", f, op, val)
		cur, err := db.Collection("docs").Find(ctx, c.filter(), options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		require.NoError(t, err)
		var want []string
		var all []bson.Raw
		for cur.Next(ctx) {
			id, _ := cur.Current.Lookup("_id").StringValueOK()
			want = append(want, id)
		}
		require.NoError(t, cur.Err())
		cur, err = db.Collection("docs").Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		require.NoError(t, err)
		for cur.Next(ctx) {
			all = append(all, append(bson.Raw(nil), cur.Current...))
		}
		var got []string
		for _, d := range all {
			if matchAll(bsoncore.Document(d), []condition{c}) {
				id, _ := d.Lookup("_id").StringValueOK()
				got = append(got, id)
			}
		}
		if !slices.Equal(want, got) {
			for _, d := range all {
				id, _ := d.Lookup("_id").StringValueOK()
				if slices.Contains(want, id) != slices.Contains(got, id) {
					t.Fatalf("%s=%s.%s: find says %v, the watch %v for %s", f, op, val, slices.Contains(want, id), slices.Contains(got, id), d)
				}
			}
		}
	}
}

// TestRelated: a changed path relates to a filter field when one contains the other,
// array indexes aside.
func TestRelated(t *testing.T) {
	cases := []struct {
		changed, field string
		want           bool
	}{
		{"status", "status", true},
		{"customer", "customer.id", true},
		{"customer.id.x", "customer.id", true},
		{"customer.0.id", "customer.id", true},
		{"customer.name", "customer.id", false},
		{"statusx", "status", false},
		{"total", "status", false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, related(tc.changed, tc.field), "%s ~ %s", tc.changed, tc.field)
	}
}
