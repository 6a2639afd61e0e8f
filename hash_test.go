package jetbus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
)

// TestVectors checks the partition of a key against testdata/partition_vectors.json, which a
// client in another language can use too. The vectors were computed by an independent
// implementation (a dozen lines of Python with arbitrary-precision integers reduced mod 2^64).
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/partition_vectors.json")
	require.NoError(t, err)
	var vectors []struct {
		Key        string
		FNV1a64    string         `json:"fnv1a64"`
		Partitions map[string]int `json:"partitions"` // partition count -> partition
	}
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.NotEmpty(t, vectors)
	for _, v := range vectors {
		t.Run(fmt.Sprintf("%q", v.Key), func(t *testing.T) {
			hash, err := strconv.ParseUint(v.FNV1a64, 16, 64)
			require.NoError(t, err)
			assert.Equal(t, hash, jetbus.KeyHash(v.Key), "KeyHash")
			for ns, p := range v.Partitions {
				n, err := strconv.Atoi(ns)
				require.NoError(t, err)
				assert.Equal(t, p, jetbus.PartitionOf(v.Key, n), "PartitionOf(%q, %d)", v.Key, n)
				assert.Equal(t, p, jetbus.Jump(hash, n), "Jump(%#x, %d)", hash, n)
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
