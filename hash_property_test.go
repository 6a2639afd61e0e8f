package jetbus_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus"
)

const propertyKeys = 1_000_000

// chiSquareCritical approximates the 0.999 quantile of the chi-square distribution with df
// degrees of freedom (Wilson–Hilferty).
func chiSquareCritical(df int) float64 {
	const z = 3.090 // standard normal 0.999 quantile
	d := float64(df)
	a := 2 / (9 * d)
	return d * math.Pow(1-a+z*math.Sqrt(a), 3)
}

// TestOfUniform checks that keys "key-0" … "key-999999" spread uniformly over N partitions: the
// chi-square statistic of the counts stays under the 0.999 quantile.
func TestPartitionOfUniform(t *testing.T) {
	for _, n := range []int{8, 16, 64, 100} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			counts := make([]int, n)
			for i := range propertyKeys {
				counts[jetbus.PartitionOf("key-"+strconv.Itoa(i), n)]++
			}
			expected := float64(propertyKeys) / float64(n)
			chi := 0.0
			for _, c := range counts {
				d := float64(c) - expected
				chi += d * d / expected
			}
			crit := chiSquareCritical(n - 1)
			t.Logf("N=%d chi²=%.1f (critical %.1f at p=0.001, df=%d)", n, chi, crit, n-1)
			assert.Less(t, chi, crit, "counts %v", counts)
		})
	}
}

// TestJumpGrowth checks the consistency of the jump hash: growing N to N+1 moves about 1/(N+1)
// of the keys, and every key that moves goes to the new partition N.
func TestJumpGrowth(t *testing.T) {
	keys := propertyKeys
	if testing.Short() {
		keys = 100_000
	}
	hashes := make([]uint64, keys)
	for i := range hashes {
		hashes[i] = jetbus.KeyHash("key-" + strconv.Itoa(i))
	}
	for _, n := range []int{1, 2, 7, 8, 15, 16, 63, 64, 99, 100} {
		t.Run(fmt.Sprintf("%d-to-%d", n, n+1), func(t *testing.T) {
			movedKeys := 0
			for _, h := range hashes {
				before, after := jetbus.Jump(h, n), jetbus.Jump(h, n+1)
				if before == after {
					continue
				}
				require.Equal(t, n, after, "hash %#x moved from %d to %d, not to the new partition", h, before, after)
				movedKeys++
			}
			want := float64(keys) / float64(n+1)
			sd := math.Sqrt(want * (1 - 1/float64(n+1)))
			t.Logf("moved %d keys, expected %.0f ± %.0f", movedKeys, want, sd)
			assert.InDelta(t, want, float64(movedKeys), 5*sd, "moved fraction is not ≈ 1/(N+1)")
		})
	}
}

// TestJumpRange checks that Jump stays in [0, n) and treats n < 1 as 1.
func TestJumpRange(t *testing.T) {
	for i := range 10_000 {
		h := jetbus.KeyHash(strconv.Itoa(i))
		for _, n := range []int{1, 3, 1000} {
			p := jetbus.Jump(h, n)
			require.True(t, p >= 0 && p < n, "Jump(%#x, %d) = %d", h, n, p)
		}
		require.Equal(t, 0, jetbus.Jump(h, 0))
		require.Equal(t, 0, jetbus.Jump(h, -5))
	}
}
