package mongodb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestIDsInMatchesExactlyTheIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := testkit.NewMongo(t, nil)
	coll := m.DB.Collection("ids")
	var all []primitive.ObjectID
	var docs []any
	for range 20 {
		id := primitive.NewObjectID()
		all = append(all, id)
		docs = append(docs, bson.M{"_id": id})
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	want := []primitive.ObjectID{all[15], all[3], all[9]} // unsorted, with gaps inside the range
	cur, err := coll.Find(ctx, bson.M{"_id": mongodb.IDsIn(want)})
	require.NoError(t, err)
	var got []struct {
		ID primitive.ObjectID `bson:"_id"`
	}
	require.NoError(t, cur.All(ctx, &got))
	ids := make([]primitive.ObjectID, len(got))
	for i, g := range got {
		ids[i] = g.ID
	}
	require.ElementsMatch(t, want, ids)
}
