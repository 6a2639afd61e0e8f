package partition

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMemberViewRevision checks what the subscriber's fence on stored assignments relies on:
// a view knows up to which revision it is complete, and only changes of the member set count.
func TestMemberViewRevision(t *testing.T) {
	v := newMemberView()
	assert.False(t, v.synced)
	assert.True(t, v.apply(MemberEvent{Op: MemberUp, ID: "a", Revision: 3}))
	assert.True(t, v.apply(MemberEvent{Op: MembersSynced}))
	assert.True(t, v.synced)
	assert.False(t, v.apply(MemberEvent{Op: MemberUp, ID: "a", Revision: 7}), "a heartbeat is not a change")
	assert.Equal(t, uint64(7), v.rev, "a heartbeat moves the revision")
	assert.True(t, v.apply(MemberEvent{Op: MemberUp, ID: "b", Revision: 9}))
	assert.Equal(t, []string{"a", "b"}, v.members())
	assert.True(t, v.apply(MemberEvent{Op: MemberExpired, ID: "a", Revision: 12}))
	assert.False(t, v.apply(MemberEvent{Op: MemberLeft, ID: "a", Revision: 13}), "already gone")
	assert.Equal(t, []string{"b"}, v.members())
	assert.Equal(t, uint64(13), v.rev)
}
