package changefeed

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/jetbus/jetbus"
)

// identity is the _id's identity to MongoDB's unique index, computed apart from Key: numbers
// of every type are one value (exact; NaNs are one, -0 is 0), a symbol is a string, anything
// else is its type and bytes. Two _ids MongoDB holds equal have the same identity, two it
// holds distinct have different ones (documents are generated with int32 numbers only,
// where bytes and MongoDB's comparison agree; see Key on numbers nested in documents).
func identity(t testing.TB, v bson.RawValue) string {
	t.Helper()
	num := func(r *big.Rat) string { return "number " + r.RatString() }
	switch v.Type {
	case bson.TypeInt32:
		return num(new(big.Rat).SetInt64(int64(v.Int32())))
	case bson.TypeInt64:
		return num(new(big.Rat).SetInt64(v.Int64()))
	case bson.TypeDouble:
		f := v.Double()
		switch {
		case math.IsNaN(f):
			return "number NaN"
		case math.IsInf(f, 0):
			return fmt.Sprintf("number %v", f)
		}
		return num(new(big.Rat).SetFloat64(f))
	case bson.TypeDecimal128:
		d := v.Decimal128()
		if d.IsNaN() {
			return "number NaN"
		}
		if d.IsInf() != 0 {
			return fmt.Sprintf("number %v", math.Inf(d.IsInf()))
		}
		bi, exp, err := d.BigInt()
		require.NoError(t, err)
		r := new(big.Rat).SetInt(bi)
		scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(exp, -exp))), nil))
		if exp >= 0 {
			r.Mul(r, scale)
		} else {
			r.Quo(r, scale)
		}
		return num(r)
	case bson.TypeString:
		return "string " + v.StringValue()
	case bson.TypeSymbol:
		return "string " + v.Symbol()
	}
	return fmt.Sprintf("%s %x", v.Type, v.Value)
}

// keyGen makes _ids of every type, with strings that look like the other types' keys.
type keyGen struct{ r *rand.Rand }

func (g keyGen) str() string {
	const alphabet = "0123456789abcdefABCDEF-.eEINaftrulsy{}[]\"\\: \x01\x7fé"
	switch g.r.IntN(8) {
	case 0:
		return bson.NewObjectIDFromTimestamp(time.Unix(g.r.Int64N(1<<32), 0)).Hex()
	case 1:
		return fmt.Sprint(g.r.Int64N(2000) - 1000)
	case 2:
		return fmt.Sprintf("%.*f", g.r.IntN(4), g.r.Float64()*100-50)
	case 3:
		return []string{"NaN", "Infinity", "-Infinity", "true", "false", "null", "", "-0", "0.0", "\xff", "\"\xff\""}[g.r.IntN(11)]
	}
	var b strings.Builder
	for range g.r.IntN(8) {
		b.WriteString(string([]rune(alphabet)[g.r.IntN(len([]rune(alphabet)))]))
	}
	return b.String()
}

func (g keyGen) double() float64 {
	switch g.r.IntN(6) {
	case 0:
		return float64(g.r.Int64N(2000) - 1000)
	case 1:
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0.1, 1 << 62, 1e21, 0.25}[g.r.IntN(8)]
	case 2:
		return math.Float64frombits(g.r.Uint64())
	case 3:
		return float64(g.r.Int64N(1<<62)) * 4 // large, beyond 2^53
	}
	return float64(g.r.IntN(2000)-1000) / []float64{2, 4, 10, 100}[g.r.IntN(4)]
}

func (g keyGen) decimal() bson.Decimal128 {
	var s string
	switch g.r.IntN(4) {
	case 0:
		s = []string{"NaN", "-NaN", "Infinity", "-Infinity", "-0", "0.00", "0.1", "7.00", "1E+3", "4611686018427387904", "0.1000000000000000055511151231257827"}[g.r.IntN(11)]
	case 1:
		s = fmt.Sprintf("%dE%d", g.r.Int64N(20000)-10000, g.r.IntN(8)-4)
	default:
		s = fmt.Sprintf("%d.%02d", g.r.IntN(200)-100, g.r.IntN(100))
	}
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		panic(err)
	}
	return d
}

func (g keyGen) value() any {
	switch g.r.IntN(12) {
	case 0:
		var b [12]byte
		binary.BigEndian.PutUint64(b[4:], g.r.Uint64N(4))
		return bson.ObjectID(b)
	case 1:
		return bson.NewObjectID()
	case 2, 3:
		return g.str()
	case 4:
		return bson.Symbol(g.str())
	case 5:
		return int32(g.r.IntN(2000) - 1000)
	case 6:
		return []int64{g.r.Int64N(2000) - 1000, 1 << 62, math.MaxInt64, math.MinInt64}[g.r.IntN(4)]
	case 7:
		return g.double()
	case 8:
		return g.decimal()
	case 9:
		return []any{true, false, nil, bson.MinKey{}, bson.MaxKey{}, bson.DateTime(g.r.Int64N(3))}[g.r.IntN(6)]
	case 10:
		return bson.Binary{Subtype: []byte{0, 4}[g.r.IntN(2)], Data: []byte(g.str())}
	}
	d := bson.D{}
	for i := range g.r.IntN(3) {
		var v any = int32(g.r.IntN(3))
		if g.r.IntN(2) == 0 {
			v = g.str()
		}
		d = append(d, bson.E{Key: []string{"a", "b", "$", "\xff"}[(i+g.r.IntN(2))%4], Value: v})
	}
	return d
}

// TestKeyInjective: over many _ids of every type, and strings equal to the keys of the others
// (an attacker's best try), two _ids get one key exactly when MongoDB holds them equal.
func TestKeyInjective(t *testing.T) {
	g := keyGen{rand.New(rand.NewPCG(28, 1))}
	byKey := map[string]string{} // key → identity
	byID := map[string]string{}  // identity → key
	check := func(v bson.RawValue) {
		t.Helper()
		key, err := Key(v)
		require.NoError(t, err)
		id := identity(t, v)
		if prev, ok := byKey[key]; ok && prev != id {
			t.Fatalf("%s and %s share the key %q", prev, id, key)
		}
		if prev, ok := byID[id]; ok && prev != key {
			t.Fatalf("%s has two keys: %q and %q", id, prev, key)
		}
		byKey[key], byID[id] = id, key
	}
	for range 20000 {
		v := rawValue(t, g.value())
		check(v)
		key, _ := Key(v)
		check(rawValue(t, key)) // the string _id equal to v's key
		check(rawValue(t, quoteKey(key)))
	}
	assert.Greater(t, len(byKey), 20000)
}

// FuzzKeyInjective: two values built from fuzzed bytes as any of several types share a key
// exactly when MongoDB holds them equal. The seeds run as a test.
func FuzzKeyInjective(f *testing.F) {
	oid, _ := bson.ObjectIDFromHex("64b7f0c2a1b2c3d4e5f60718")
	f.Add(byte(0), []byte("64b7f0c2a1b2c3d4e5f60718"), byte(1), oid[:])
	f.Add(byte(0), []byte("7"), byte(2), []byte("7"))
	f.Add(byte(0), []byte("7"), byte(3), []byte("7.00"))
	f.Add(byte(2), []byte("0.1"), byte(3), []byte("0.1"))
	f.Add(byte(0), []byte(`"7"`), byte(0), []byte("7"))
	f.Add(byte(0), []byte("true"), byte(4), []byte{1})
	f.Add(byte(0), []byte("NaN"), byte(2), []byte("NaN"))
	f.Add(byte(0), []byte(`{"$date":{"$numberLong":"0"}}`), byte(5), []byte("0"))
	f.Add(byte(0), []byte("a\xffb"), byte(0), []byte("a\ufffdb"))
	f.Add(byte(6), []byte("\xff"), byte(6), []byte("\xfe"))
	f.Fuzz(func(t *testing.T, ta byte, a []byte, tb byte, b []byte) {
		va, ok1 := fuzzValue(ta, a)
		vb, ok2 := fuzzValue(tb, b)
		if !ok1 || !ok2 {
			t.Skip()
		}
		ra, rb := rawValue(t, va), rawValue(t, vb)
		ka, err := Key(ra)
		require.NoError(t, err)
		kb, err := Key(rb)
		require.NoError(t, err)
		if same := identity(t, ra) == identity(t, rb); same != (ka == kb) {
			t.Fatalf("%v (%q) and %v (%q): MongoDB equal %v, keys equal %v", va, ka, vb, kb, same, ka == kb)
		}
	})
}

// fuzzValue builds a value of a type chosen by typ from b.
func fuzzValue(typ byte, b []byte) (any, bool) {
	switch typ % 7 {
	case 0:
		return string(b), true
	case 1:
		if len(b) != 12 {
			return nil, false
		}
		return bson.ObjectID(b), true
	case 2:
		f, err := parseFloat(string(b))
		return f, err == nil
	case 3:
		d, err := bson.ParseDecimal128(string(b))
		return d, err == nil
	case 4:
		if len(b) != 1 {
			return nil, false
		}
		return b[0]&1 == 1, true
	case 5:
		var n int64
		for _, c := range b {
			n = n*10 + int64(c%10)
		}
		return []any{n, bson.DateTime(n)}[len(b)%2], true
	}
	return bson.D{{Key: "a", Value: string(b)}}, true
}

func parseFloat(s string) (float64, error) {
	var f float64
	_, err := fmt.Sscan(s, &f)
	if s == "NaN" {
		return math.NaN(), nil
	}
	return f, err
}

// TestKeysAreValidEventKeys: the keys of ordinary _ids are valid event keys; only an _id
// whose key is over jetbus.MaxKeyLength (or a string with control characters, written as is)
// is not, and its change is dead-lettered.
func TestKeysAreValidEventKeys(t *testing.T) {
	dec, _ := bson.ParseDecimal128("-12.50")
	for _, id := range []any{bson.NewObjectID(), "cust-1", "7", "64b7f0c2a1b2c3d4e5f60718", `{"a":"\u0001"}`, "[\x01",
		int32(-7), int64(math.MaxInt64), 0.1, math.MaxFloat64, math.NaN(), dec, bson.D{{Key: "a", Value: "\xff"}},
		bson.D{{Key: "user", Value: int32(1)}, {Key: "day", Value: "2026-01-02"}}, bson.Binary{Subtype: 4, Data: make([]byte, 16)}} {
		key, err := Key(rawValue(t, id))
		require.NoError(t, err)
		assert.NoError(t, jetbus.ValidateKey(key), "%v → %q", id, key)
	}
	key, err := Key(rawValue(t, math.SmallestNonzeroFloat64))
	require.NoError(t, err)
	assert.ErrorIs(t, jetbus.ValidateKey(key), jetbus.ErrInvalidKey, "5e-324's exact decimal has 1074 places")
}
