package mongostore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
)

// TestDeleteDispatchedInRounds: DeleteDispatched deletes in rounds of at
// most a chunk (one find of ids, one deleteMany each) and at most a number
// of rounds a call; the rest is left to the next call. Entries dispatched
// later, and undispatched ones, stay.
func TestDeleteDispatchedInRounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := &CommandCounter{}
	s, err := Open(ctx, LungoMemory, &Options{Commands: cc})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(ctx) })
	require.NoError(t, s.Migrate(ctx, nil))
	now := time.Now().UTC().Truncate(time.Millisecond)
	old, recent := now.Add(-2*time.Hour), now
	var docs []any
	add := func(n int, at *time.Time) {
		for range n {
			docs = append(docs, entryDoc{ID: primitive.NewObjectID(), EventID: primitive.NewObjectID(), Stream: "s", Message: "{}",
				CreatedAt: now, DispatchedAt: at})
		}
	}
	add(25, &old)
	add(3, &recent)
	add(2, nil)
	_, err = s.outbox.InsertMany(ctx, docs)
	require.NoError(t, err)
	before := now.Add(-time.Hour)

	cc.Reset()
	n, err := s.deleteDispatched(ctx, before, 10, 2)
	require.NoError(t, err)
	require.Equal(t, int64(20), n, "two rounds of ten")
	require.Equal(t, map[string]int{"find": 2, "delete": 2}, cc.Counts())
	n, err = s.deleteDispatched(ctx, before, 10, 2)
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "a short round ends the call")
	n, err = s.DeleteDispatched(ctx, before)
	require.NoError(t, err)
	require.Zero(t, n)
	left, err := s.outbox.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(5), left, "the recent and the undispatched entries stay")
}
