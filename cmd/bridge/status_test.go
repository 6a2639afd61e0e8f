package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest"
	"github.com/jetbus/jetbus/internal/ops"
	"github.com/jetbus/jetbus/internal/ops/opstest"
)

// TestStatus: `bridge status` shows the owners, leases and lag per partition that
// partition.Status and the Bus's Cursor report, as JSON and as a table.
func TestStatus(t *testing.T) {
	s := embeddedtest.NATS(t)
	g := opstest.StartGroup(t, s.ClientURL())
	truth, cur := g.Truth(t)

	code, out, errOut := runArgs(t, "status", "--json", "--nats-url", s.ClientURL())
	require.Equal(t, 0, code, errOut)
	var st ops.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Groups, 1)
	gs := st.Groups[0]
	require.Len(t, gs.Partitions, g.Partitions)
	for p, ps := range gs.Partitions {
		assert.Equal(t, truth.Assignment.Owners[p], ps.Owner, "owner of %d", p)
		assert.Equal(t, truth.Leases[p].Owner, ps.LeaseOwner, "lease of %d", p)
		assert.Equal(t, cur.Partitions[p].Pending+uint64(cur.Partitions[p].AckPending), ps.Lag, "lag of %d", p)
	}
	assert.Equal(t, cur.Lag(), gs.Lag)

	code, out, errOut = runArgs(t, "status", "--nats-url", s.ClientURL())
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^orders +4 +1 +40 +1 +40 *$`, out, "the topic")
	assert.Regexp(t, fmt.Sprintf(`(?m)^billing +orders +2 +yes +%d +\S+ *$`, cur.Lag()), out, "the group (and its lag in time)")
	for p := range g.Partitions {
		pc := cur.Partitions[p]
		row := fmt.Sprintf(`(?m)^billing +orders +%d +%s +held +%s +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +%d +%d +%d +%d +%d +\S+ *$`,
			p, regexp.QuoteMeta(truth.Assignment.Owners[p]), regexp.QuoteMeta(truth.Leases[p].Owner),
			pc.AckFloor, pc.Delivered, pc.Pending, pc.AckPending, pc.Pending+uint64(pc.AckPending))
		assert.Regexp(t, row, out, "partition %d", p)
	}
	assert.Contains(t, out, "DEAD LETTERS: no DLQ stream")
}
