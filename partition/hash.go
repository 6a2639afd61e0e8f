package partition

// FNV-1a 64-bit parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Hash returns the FNV-1a 64-bit hash of key's UTF-8 bytes.
//
// Vectors (see hash_test.go for more):
//
//	Hash("")    = 0xcbf29ce484222325
//	Hash("a")   = 0xaf63dc4c8601ec8c
//	Hash("foo") = 0xdcb27518fed9d577
func Hash(key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return h
}

// Jump maps h to a bucket in [0, n) with Lamping and Veach's jump consistent hash ("A Fast,
// Minimal Memory, Consistent Hash Algorithm", 2014): growing n to n+1 moves about 1/(n+1) of
// the keys, all of them to the new bucket. n < 1 is treated as 1.
//
// The algorithm, for any language (64-bit unsigned arithmetic, wrapping):
//
//	b, j := -1, 0
//	while j < n:
//	    b = j
//	    h = h*2862933555777941757 + 1
//	    j = floor((b+1) * (2^31 / ((h>>33)+1)))   // in double precision
//	return b
func Jump(h uint64, n int) int {
	if n < 1 {
		n = 1
	}
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		h = h*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((h>>33)+1)))
	}
	return int(b)
}

// Of returns the partition of key in a topic with n partitions: Jump(Hash(key), n).
func Of(key string, n int) int { return Jump(Hash(key), n) }
