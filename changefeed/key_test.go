package changefeed

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// rawValue marshals v as a BSON value.
func rawValue(t *testing.T, v any) bson.RawValue {
	t.Helper()
	b, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	require.NoError(t, err)
	return bson.Raw(b).Lookup("v")
}

func TestKey(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("64b7f0c2a1b2c3d4e5f60718")
	dec, _ := bson.ParseDecimal128("7.00")
	big, _ := bson.ParseDecimal128("1.5E+3")
	cases := []struct {
		name string
		id   any
		want string
	}{
		{"ObjectId", oid, "64b7f0c2a1b2c3d4e5f60718"},
		{"string as is", "Cust 1/é", "Cust 1/é"},
		{"empty string", "", ""},
		{"uppercase hex string as is", "64B7F0C2A1B2C3D4E5F60718", "64B7F0C2A1B2C3D4E5F60718"},
		{"string that is not a canonical number as is", "7.0", "7.0"},
		{"string with a leading zero as is", "07", "07"},
		{"string with an exponent as is", "1e3", "1e3"},
		{"string of an ObjectId's hex quoted", "64b7f0c2a1b2c3d4e5f60718", `"64b7f0c2a1b2c3d4e5f60718"`},
		{"string of a number quoted", "7", `"7"`},
		{"string of a negative fraction quoted", "-0.25", `"-0.25"`},
		{"string NaN quoted", "NaN", `"NaN"`},
		{"string -Infinity quoted", "-Infinity", `"-Infinity"`},
		{"string true quoted", "true", `"true"`},
		{"string null quoted", "null", `"null"`},
		{"string of JSON quoted", `{"a":1}`, `"{\"a\":1}"`},
		{"string starting with a quote quoted", `"7"`, `"\"7\""`},
		{"string starting with a bracket quoted, control characters escaped", "[\x01\x7f\\", `"[\u0001\u007f\\"`},
		{"symbol as a string", bson.Symbol("7"), `"7"`},
		{"int32", int32(-7), "-7"},
		{"int64", int64(1) << 60, "1152921504606846976"},
		{"integral double", 7.0, "7"},
		{"fractional double", 0.25, "0.25"},
		{"double in exact decimal", 0.1, "0.1000000000000000055511151231257827021181583404541015625"},
		{"large double without exponent", 1e21, "1000000000000000000000"},
		{"double above 2^53 exactly", float64(1 << 62), "4611686018427387904"},
		{"negative zero", math.Copysign(0, -1), "0"},
		{"NaN", math.NaN(), "NaN"},
		{"infinity", math.Inf(-1), "-Infinity"},
		{"decimal with trailing zeros", dec, "7"},
		{"decimal with exponent", big, "1500"},
		{"document", bson.D{{Key: "a", Value: int32(1)}, {Key: "b", Value: "x"}}, `{"a":{"$numberInt":"1"},"b":"x"}`},
		{"date", time.UnixMilli(0).UTC(), `{"$date":{"$numberLong":"0"}}`},
		{"boolean", true, "true"},
		{"null", nil, "null"},
		{"document with a string that is not UTF-8", bson.D{{Key: "a", Value: "\xff"}}, `{"$bson":"03:DgAAAAJhAAIAAAD/AAA="}`},
		{"UUID", bson.Binary{Subtype: 4, Data: make([]byte, 16)}, `{"$binary":{"base64":"AAAAAAAAAAAAAAAAAAAAAA==","subType":"04"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Key(rawValue(t, tc.id))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	t.Run("equal numbers give one key", func(t *testing.T) {
		a, _ := Key(rawValue(t, int32(7)))
		b, _ := Key(rawValue(t, int64(7)))
		c, _ := Key(rawValue(t, 7.0))
		d, _ := Key(rawValue(t, dec))
		assert.Equal(t, []string{"7", "7", "7", "7"}, []string{a, b, c, d})
	})
	t.Run("missing _id", func(t *testing.T) {
		_, err := Key(bson.RawValue{})
		assert.Error(t, err)
	})
}

func TestAppendJSON(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("64b7f0c2a1b2c3d4e5f60718")
	dec, _ := bson.ParseDecimal128("12.50")
	uuid := bson.Binary{Subtype: 4, Data: []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}}
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"document keeps field order", bson.D{{Key: "z", Value: int32(1)}, {Key: "a", Value: int64(2)}}, `{"z":1,"a":2}`},
		{"array", bson.A{"x", 1.5, nil, false}, `["x",1.5,null,false]`},
		{"ObjectId as hex", oid, `"64b7f0c2a1b2c3d4e5f60718"`},
		{"date in RFC 3339 with ms", time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), `"2026-01-02T03:04:05.006Z"`},
		{"decimal as text", dec, `"12.5"`},
		{"UUID", uuid, `"12345678-9abc-def0-1234-56789abcdef0"`},
		{"binary as base64", bson.Binary{Subtype: 0, Data: []byte("hi")}, `"aGk="`},
		{"timestamp", bson.Timestamp{T: 5, I: 6}, `{"t":5,"i":6}`},
		{"regex", bson.Regex{Pattern: "^a", Options: "i"}, `"/^a/i"`},
		{"NaN", math.NaN(), `"NaN"`},
		{"escapes", "a\"b\\c\n\x01<>&\u2028", `"a\"b\\c\n\u0001<>&\u2028"`},
		{"min and max keys", bson.A{bson.MinKey{}, bson.MaxKey{}}, `["MinKey","MaxKey"]`},
		{"int64 stays exact", int64(1)<<62 + 1, `4611686018427387905`},
		{"nested", bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: bson.A{bson.D{{Key: "c", Value: "d"}}}}}}}, `{"a":{"b":[{"c":"d"}]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendJSON(nil, rawValue(t, tc.v))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
	t.Run("invalid UTF-8 is replaced", func(t *testing.T) {
		got := appendString(nil, "a\xffb")
		assert.Equal(t, `"a\ufffdb"`, string(got))
	})
}

func TestTokenTime(t *testing.T) {
	tok, err := bson.Marshal(bson.D{{Key: "_data", Value: "8264B7F0C2000000052B042C0100296E5A1004"}})
	require.NoError(t, err)
	ct := tokenTime(tok)
	require.NotNil(t, ct)
	assert.Equal(t, ClusterTime{T: 0x64B7F0C2, I: 5}, *ct)
	other, _ := bson.Marshal(bson.D{{Key: "_data", Value: "zz"}})
	assert.Nil(t, tokenTime(other), "not a KeyString token")
}

// TestOutboxID: an outbox document's string _id is its event ID as the application chose it
// (AppendOutbox returned it), even when Key would quote it; other types are Key's.
func TestOutboxID(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("64b7f0c2a1b2c3d4e5f60718")
	for _, tc := range []struct {
		id   any
		want string
	}{
		{"7", "7"},
		{"64b7f0c2a1b2c3d4e5f60718", "64b7f0c2a1b2c3d4e5f60718"},
		{`{"a":1}`, `{"a":1}`},
		{oid, "64b7f0c2a1b2c3d4e5f60718"},
		{int64(7), "7"},
	} {
		got, err := outboxID(rawValue(t, tc.id))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%v", tc.id)
	}
}
