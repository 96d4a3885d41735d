package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeldMarks: a mark says an event is held until its time, and no
// longer; under a steady trickle of marks that pass (a failing record
// held, then dead-lettered, one after another), each MarkHeld removes
// marks past their time, so that the hash stays small while it never
// expires as a whole, and a mark still in force is never removed.
func TestHeldMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	now := time.Now()
	require.NoError(t, b.c.MarkHeld(ctx, b.keys, map[string]time.Time{"live": now.Add(time.Hour), "soon": now.Add(time.Minute)}))
	held, err := b.c.HeldAt(ctx, b.keys, []string{"live", "soon", "other"}, now)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"live": true, "soon": true}, held)
	held, err = b.c.HeldAt(ctx, b.keys, []string{"live", "soon"}, now.Add(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"live": true}, held, "a mark past its time holds nothing")

	const trickle = 2000
	for i := range trickle {
		// A mark that has passed by the next call.
		require.NoError(t, b.c.MarkHeld(ctx, b.keys, map[string]time.Time{fmt.Sprintf("ev-%d", i): time.Now().Add(-time.Millisecond)}))
	}
	n, err := b.rdb.HLen(ctx, b.keys.Held()).Result()
	require.NoError(t, err)
	require.Less(t, n, int64(100), "the marks past their time are removed as new ones come")
	require.True(t, b.rdb.HExists(ctx, b.keys.Held(), "live").Val(), "a mark in force stays")
	require.True(t, b.rdb.HExists(ctx, b.keys.Held(), "soon").Val(), "a mark in force stays")
	ttl, err := b.rdb.PTTL(ctx, b.keys.Held()).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 23*time.Hour, "the hash still expires as a whole")
}
