package partition

import (
	"slices"
	"sort"

	"github.com/jetbus/jetbus"
)

// Assign returns an owner for each of n partitions among members: Rebalance(nil, members, n).
func Assign(members []string, n int) []string { return Rebalance(nil, members, n) }

// Rebalance returns the owner of each of n partitions among members (result[p] is a member
// ID; every entry is "" when members is empty), starting from the previous assignment prev
// (nil for none). It is a pure function of (prev, the set of members, n): the order of members
// and duplicates in it do not matter, so every member that computes it from the same previous
// assignment and the same member list gets the same answer.
//
// Guarantees:
//
//   - Balanced: loads differ by at most one. With M members, n mod M of them own ⌈n/M⌉
//     partitions and the others ⌊n/M⌋.
//   - Minimal movement from a balanced prev: when one member joins the M members of prev, only
//     partitions that go to it move (at most ⌈n/(M+1)⌉); when one of them leaves, only its
//     partitions move, each to one of the least loaded members.
//   - Otherwise (several changes at once, a new partition count, no prev) partitions keep
//     their owner where balance allows; the ones that must move go, in partition order, to
//     the member with the highest rendezvous score among those below their quota.
//
// Why the previous assignment is an input: no function of the member set alone can be
// balanced and move only a leaver's partitions for every member set once n ≥ 3 (for each
// partition, "never moves when others leave" forces the owner to be the maximum of a fixed
// order of all member IDs, and rendezvous hashing over fixed orders cannot be balanced for
// every set). Package partition therefore keeps the current assignment in KV and every member
// derives the next one from it with this function; a compare-and-set on its revision makes
// all members agree on the history.
func Rebalance(prev []string, members []string, n int) []string {
	if n < 0 {
		n = 0
	}
	owners := make([]string, n)
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if len(ms) > 0 && ms[0] == "" {
		ms = ms[1:]
	}
	if len(ms) == 0 {
		return owners
	}
	live := make(map[string]bool, len(ms))
	for _, m := range ms {
		live[m] = true
	}
	load := make(map[string]int, len(ms))
	for p := range owners {
		if p < len(prev) && live[prev[p]] {
			owners[p] = prev[p]
			load[prev[p]]++
		}
	}

	// Quotas: q each, and q+1 for the r members that hold the most now (ties: lower ID), so
	// that nobody who keeps its load has to give or take.
	q, r := n/len(ms), n%len(ms)
	byLoad := slices.Clone(ms)
	sort.SliceStable(byLoad, func(i, j int) bool { return load[byLoad[i]] > load[byLoad[j]] })
	quota := make(map[string]int, len(ms))
	for i, m := range byLoad {
		quota[m] = q
		if i < r {
			quota[m] = q + 1
		}
	}

	// Members above quota give up the partitions they score lowest on.
	for _, m := range ms {
		excess := load[m] - quota[m]
		if excess <= 0 {
			continue
		}
		var mine []int
		for p, o := range owners {
			if o == m {
				mine = append(mine, p)
			}
		}
		sort.SliceStable(mine, func(i, j int) bool { return score(m, mine[i]) < score(m, mine[j]) })
		for _, p := range mine[:excess] {
			owners[p] = ""
		}
		load[m] = quota[m]
	}

	// Free partitions go, in partition order, to the member below quota with the highest
	// rendezvous score. The quotas add up to n, so every partition finds one.
	for p, o := range owners {
		if o != "" {
			continue
		}
		best := ""
		var bestScore uint64
		for _, m := range ms {
			if load[m] >= quota[m] {
				continue
			}
			if s := score(m, p); best == "" || s > bestScore {
				best, bestScore = m, s
			}
		}
		owners[p] = best
		load[best]++
	}
	return owners
}

// Owned returns the partitions owners assigns to member, in increasing order.
func Owned(owners []string, member string) []int {
	var ps []int
	for p, o := range owners {
		if o == member {
			ps = append(ps, p)
		}
	}
	return ps
}

// score is the rendezvous (highest random weight) score of member for partition p.
func score(member string, p int) uint64 {
	return mix64(jetbus.KeyHash(member) ^ (uint64(p)+1)*0x9e3779b97f4a7c15)
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
