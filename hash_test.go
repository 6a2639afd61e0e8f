package jetbus_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

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
