package jetstream

import (
	"math/rand/v2"
	"time"
)

// newEventID returns a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random
// bits and the variant. It is generated here rather than by a UUID library because it runs on
// every publish: the random bits come from the runtime's per-thread ChaCha8 generator, with
// no lock and no system call. IDs need to be unique, not unpredictable.
func newEventID(now time.Time) string {
	ms := uint64(now.UnixMilli())
	r1, r2 := rand.Uint64(), rand.Uint64()
	var b [16]byte
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(r1>>60)&0x0f // version 7
	b[7] = byte(r1 >> 52)
	b[8] = 0x80 | byte(r2>>58)&0x3f // variant 10
	for i := 9; i < 16; i++ {
		b[i] = byte(r2 >> (8 * (i - 9)))
	}
	const hex = "0123456789abcdef"
	var s [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hex[c>>4], hex[c&0x0f]
		j += 2
	}
	return string(s[:])
}
