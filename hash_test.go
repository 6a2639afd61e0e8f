package jetbus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
)

// vectors were computed by an independent implementation (a dozen lines of Python with
// arbitrary-precision integers reduced mod 2^64); clients in other languages must match them.
var vectors = []struct {
	key  string
	hash uint64
	// partition for n = 1, 2, 8, 16, 64, 100
	parts [6]int
}{
	{"", 0xcbf29ce484222325, [6]int{0, 1, 1, 13, 17, 90}},
	{"a", 0xaf63dc4c8601ec8c, [6]int{0, 1, 2, 12, 31, 31}},
	{"foo", 0xdcb27518fed9d577, [6]int{0, 1, 1, 1, 1, 90}},
	{"user-42", 0x32c6d7a54d35dacb, [6]int{0, 0, 0, 9, 52, 79}},
	{"order:1001", 0x5e16746520caee69, [6]int{0, 1, 1, 1, 18, 18}},
	{"ключ", 0x296130de6f5b7a81, [6]int{0, 0, 4, 12, 55, 55}},
	{"🙂", 0xff026b387504e24b, [6]int{0, 1, 4, 4, 4, 64}},
}

func TestVectors(t *testing.T) {
	ns := [6]int{1, 2, 8, 16, 64, 100}
	for _, v := range vectors {
		t.Run(fmt.Sprintf("%q", v.key), func(t *testing.T) {
			assert.Equal(t, v.hash, jetbus.KeyHash(v.key), "KeyHash")
			for i, n := range ns {
				assert.Equal(t, v.parts[i], jetbus.PartitionOf(v.key, n), "PartitionOf(%q, %d)", v.key, n)
				assert.Equal(t, v.parts[i], jetbus.Jump(v.hash, n), "Jump(%#x, %d)", v.hash, n)
			}
		})
	}
}

// TestKeyTokenVectors checks KeyToken against testdata/key_tokens.json, which a client in
// another language can use too (the tokens were checked with an independent implementation:
// Python's base64.urlsafe_b64encode without padding).
func TestKeyTokenVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/key_tokens.json")
	require.NoError(t, err)
	var vectors []struct{ Name, Key, Token string }
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.NotEmpty(t, vectors)
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			assert.Equal(t, v.Token, jetbus.KeyToken(v.Key))
			key, ok := jetbus.ParseKeyToken(v.Token)
			assert.True(t, ok)
			assert.Equal(t, v.Key, key)
			assert.True(t, validSubjectToken(v.Token), "%q is one subject token", v.Token)
		})
	}
}

// validSubjectToken reports whether s can be one token of a subject a client publishes to:
// non-empty, no separator, wildcard or whitespace.
func validSubjectToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ". \t\r\n*>") && utf8.ValidString(s)
}

// FuzzKeyToken: every key's token is one valid subject token and parses back to the key, so
// the rule is injective; strings that are no token are refused.
func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"", "~", "a", "a.b", "~YS5i", "~dXNlci00Mg", strings.Repeat("k", 129), "🙂"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tok := jetbus.KeyToken(key)
		if !validSubjectToken(tok) {
			t.Fatalf("KeyToken(%q) = %q is not one subject token", key, tok)
		}
		back, ok := jetbus.ParseKeyToken(tok)
		if !ok || back != key {
			t.Fatalf("ParseKeyToken(KeyToken(%q)) = %q, %v", key, back, ok)
		}
		// Anything ParseKeyToken accepts is the token of what it returns.
		if k, ok := jetbus.ParseKeyToken(key); ok && jetbus.KeyToken(k) != key {
			t.Fatalf("ParseKeyToken(%q) = %q, whose token is %q", key, k, jetbus.KeyToken(k))
		}
	})
}

func TestParseSubject(t *testing.T) {
	for _, c := range []struct {
		in, topic, token string
		p                int
		ok               bool
	}{
		{"orders.p3", "orders", "", 3, true},
		{"orders.created.p0", "orders.created", "", 0, true},
		{"orders.p3.user-42", "orders", "user-42", 3, true},
		{"orders.p3.p5", "orders", "p5", 3, true},
		{"orders.p3.~YS5i", "orders", "~YS5i", 3, true},
		{"orders", "", "", 0, false},
		{"orders.x", "", "", 0, false},
		{"Orders.p1", "", "", 0, false},
		{"orders.p1.", "", "", 0, false},
	} {
		topic, p, token, ok := jetbus.ParseSubject(c.in)
		assert.Equal(t, []any{c.topic, c.p, c.token, c.ok}, []any{topic, p, token, ok}, c.in)
	}
}
