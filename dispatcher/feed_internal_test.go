package dispatcher

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
)

// TestCatchUpOnlyWhenThePositionIsLost pins the decision: a feed resumed
// from a saved position the store accepted delivers in commit order and is
// not preceded by a catch-up (which reads in entry id order, ObjectID order
// on MongoDB); a first start, a forgotten position and a lost one are
// caught up from the outbox.
func TestCatchUpOnlyWhenThePositionIsLost(t *testing.T) {
	t.Parallel()
	token := store.Position(`{"_data":"8263"}`)
	require.False(t, catchUpNeeded(token, nil), "a resumed feed delivers what is undispatched")
	require.True(t, catchUpNeeded(nil, nil), "a first start (or a forgotten position) opens from now")
	require.True(t, catchUpNeeded(token, store.ErrPositionLost), "a refused or lost token")
	require.True(t, catchUpNeeded(token, errPositionUnreadable), "an unreadable saved position")
	require.True(t, catchUpNeeded(nil, store.ErrFeedInvalidated), "an invalidated feed reopens from now")
}

// TestIdleCheckpointDue pins when a quiet feed writes its checkpoint:
// every IdleCheckpointMax while it delivered nothing (not every
// IdleCheckpoint: one majority write per idle partition and second), and
// IdleCheckpoint after it delivered only entries relayed already.
func TestIdleCheckpointDue(t *testing.T) {
	t.Parallel()
	cfg := &Config{IdleCheckpoint: time.Second, IdleCheckpointMax: time.Minute}
	require.False(t, idleCheckpointDue(2*time.Second, false, cfg))
	require.False(t, idleCheckpointDue(59*time.Second, false, cfg))
	require.True(t, idleCheckpointDue(time.Minute, false, cfg))
	require.False(t, idleCheckpointDue(500*time.Millisecond, true, cfg))
	require.True(t, idleCheckpointDue(time.Second, true, cfg))
	short := &Config{IdleCheckpoint: time.Second, IdleCheckpointMax: time.Millisecond}
	require.False(t, idleCheckpointDue(500*time.Millisecond, false, short), "never more often than IdleCheckpoint")
}
