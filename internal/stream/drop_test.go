package stream_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDropUndelivered: the entries of the replay lane that the group has
// not been delivered are deleted, more than a chunk of them; the ones
// delivered (pending) and the live stream stay.
func TestDropUndelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	lane := b.keys.ReplayLane()
	live := b.add(t, b.keys.Stream(), "live", 5)
	ids := b.add(t, lane.Stream(), "r", 2500)
	g := b.c.Group(lane, "w")
	_, err := g.Ensure(ctx)
	require.NoError(t, err)
	got, err := g.Read(ctx, ">", 3, -1)
	require.NoError(t, err)
	require.Len(t, got, 3)

	n, err := b.c.DropUndelivered(ctx, lane)
	require.NoError(t, err)
	require.EqualValues(t, len(ids)-3, n)
	require.Equal(t, ids[:3], b.entriesOf(t, lane.Stream()), "the delivered entries stay")
	require.Equal(t, live, b.entriesOf(t, b.keys.Stream()), "the live stream is untouched")
	n, err = b.c.DropUndelivered(ctx, lane)
	require.NoError(t, err)
	require.Zero(t, n)
}
