package partition_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/partition"
)

func randomMembers(rng *rand.Rand, n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("m-%016x", rng.Uint64())
	}
	return ms
}

// requireBalanced fails unless owners assigns every partition to a member of ms and loads
// differ by at most one.
func requireBalanced(t *testing.T, owners, ms []string) {
	t.Helper()
	load := map[string]int{}
	for _, m := range ms {
		load[m] = 0
	}
	for p, o := range owners {
		_, ok := load[o]
		require.True(t, ok, "partition %d owned by %q, not a member of %v", p, o, ms)
		load[o]++
	}
	lo, hi := len(owners), 0
	for _, l := range load {
		lo, hi = min(lo, l), max(hi, l)
	}
	require.LessOrEqual(t, hi-lo, 1, "loads %v", load)
}

func moved(a, b []string) []int {
	var ps []int
	for p := range a {
		if a[p] != b[p] {
			ps = append(ps, p)
		}
	}
	return ps
}

func TestAssignBalancedAndDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(128)
		ms := randomMembers(rng, 1+rng.IntN(24))
		owners := partition.Assign(ms, n)
		require.Len(t, owners, n)
		requireBalanced(t, owners, ms)

		shuffled := slices.Clone(ms)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, ms[0]) // a duplicate changes nothing either
		require.Equal(t, owners, partition.Assign(shuffled, n), "order of members matters")
	}
}

func TestAssignEdgeCases(t *testing.T) {
	assert.Equal(t, []string{"", ""}, partition.Assign(nil, 2), "no members: no owners")
	assert.Empty(t, partition.Assign([]string{"a"}, 0))
	assert.Equal(t, []string{"a", "a", "a"}, partition.Assign([]string{"a"}, 3))
	owners := partition.Assign([]string{"a", "b", "c", "d"}, 2)
	requireBalancedLoose(t, owners)
	assert.Equal(t, []int{0, 2}, partition.Owned([]string{"x", "y", "x"}, "x"))
}

func requireBalancedLoose(t *testing.T, owners []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range owners {
		require.NotEmpty(t, o)
		require.False(t, seen[o], "more members than partitions: each owns at most one")
		seen[o] = true
	}
}

// TestRebalanceMovement drives random histories of joins and leaves and checks every step:
// balanced, a join moves at most ⌈P/(M+1)⌉ partitions and all of them to the newcomer, a leave
// moves exactly the leaver's partitions.
func TestRebalanceMovement(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := 1 + rng.IntN(96)
		ms := randomMembers(rng, 1+rng.IntN(6))
		owners := partition.Assign(ms, n)
		for step := range 40 {
			m := len(ms)
			if m == 1 || rng.IntN(2) == 0 && m < 30 {
				x := randomMembers(rng, 1)[0]
				next := partition.Rebalance(owners, append(slices.Clone(ms), x), n)
				mv := moved(owners, next)
				assert.LessOrEqual(t, len(mv), (n+m)/(m+1), "trial %d step %d: join of %s to %d members, P=%d", trial, step, x, m, n)
				for _, p := range mv {
					require.Equal(t, x, next[p], "trial %d step %d: partition %d moved to %s, not to the newcomer", trial, step, p, next[p])
				}
				ms, owners = append(ms, x), next
			} else {
				i := rng.IntN(m)
				leaver := ms[i]
				rest := slices.Delete(slices.Clone(ms), i, i+1)
				next := partition.Rebalance(owners, rest, n)
				require.Equal(t, partition.Owned(owners, leaver), moved(owners, next),
					"trial %d step %d: leave of %s from %d members, P=%d: moved partitions are not exactly the leaver's", trial, step, leaver, m, n)
				ms, owners = rest, next
			}
			requireBalanced(t, owners, ms)
		}
	}
}

// TestRebalanceConverges checks that several changes at once, and a change of the partition
// count, still give a balanced assignment, and that rebalancing a balanced assignment with the
// same members changes nothing.
func TestRebalanceConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		n := 1 + rng.IntN(64)
		prevMembers := randomMembers(rng, 1+rng.IntN(10))
		prev := partition.Assign(prevMembers, n)
		ms := append(prevMembers[:rng.IntN(len(prevMembers))], randomMembers(rng, 1+rng.IntN(5))...)
		n2 := n + rng.IntN(3) - 1
		next := partition.Rebalance(prev, ms, n2)
		require.Len(t, next, max(n2, 0))
		requireBalanced(t, next, ms)
		require.Equal(t, next, partition.Rebalance(next, ms, n2), "rebalancing a stable assignment moved partitions")
	}
}
