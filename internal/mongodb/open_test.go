package mongodb_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/internal/mongodb"
)

func TestFileEngineLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := "embedded:" + filepath.Join(t.TempDir(), "sub", "outboxd.db")
	first, err := mongodb.Open(ctx, uri, nil)
	require.NoError(t, err)
	_, err = first.Client.Database("d").Collection("c").InsertOne(ctx, bson.M{"a": 1})
	require.NoError(t, err)

	_, err = mongodb.Open(ctx, uri, nil)
	require.ErrorIs(t, err, mongodb.ErrLocked)
	require.Contains(t, err.Error(), "is in use")

	// The first keeps working, and after it closes the store opens again with its data.
	n, err := first.Client.Database("d").Collection("c").CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.NoError(t, first.Close(ctx))
	again, err := mongodb.Open(ctx, uri, nil)
	require.NoError(t, err)
	defer again.Close(ctx)
	n, err = again.Client.Database("d").Collection("c").CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func TestValidateURI(t *testing.T) {
	t.Parallel()
	for uri, ok := range map[string]bool{
		"embedded:memory":               true,
		"embedded:data/x.db":            true,
		"embedded:":                     false,
		"mongodb://a:b@h:27017/?rs=rs0": true,
		"mongodb+srv://cluster.example": true,
		"http://h":                      false,
		"":                              false,
	} {
		err := mongodb.ValidateURI(uri)
		require.Equal(t, ok, err == nil, "%q: %v", uri, err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	require.Equal(t, "mongodb://u:xxxxx@h:1/db", mongodb.Redact("mongodb://u:secret@h:1/db"))
	require.Equal(t, "postgres://u:xxxxx@h/db?sslmode=disable", mongodb.Redact("postgres://u:pw@h/db?sslmode=disable"))
	require.Equal(t, "redis://127.0.0.1:6379/0", mongodb.Redact("redis://127.0.0.1:6379/0"))
	require.NotContains(t, mongodb.Redact("mongodb://u:p%zz@h"), "p%zz")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := mongodb.Open(ctx, mongodb.EmbeddedMemory, nil)
	require.NoError(t, err)
	coll := conn.Client.Database("d").Collection("c")
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.M{"k": 1}, Options: nil})
	require.NoError(t, err)
	_, err = coll.Indexes().CreateOne(ctx, uniqueK())
	require.NoError(t, err)
	_, err = coll.InsertOne(ctx, bson.M{"k2": 1})
	require.NoError(t, err)
	_, err = coll.InsertOne(ctx, bson.M{"k2": 1})
	require.True(t, mongodb.IsDuplicateKey(err), "%v", err)
	require.False(t, mongodb.IsUnavailable(err))

	require.True(t, mongodb.IsHistoryLost(lungo.ErrLostOplogPosition))
	require.True(t, mongodb.IsHistoryLost(fmt.Errorf("wrapped: %w", lungo.ErrLostOplogPosition)))
	require.True(t, mongodb.IsHistoryLost(mongo.CommandError{Code: 286, Name: "ChangeStreamHistoryLost"}))
	require.True(t, mongodb.IsHistoryLost(errors.New("unable to resume change stream")))
	require.False(t, mongodb.IsHistoryLost(errors.New("boom")))

	require.NoError(t, conn.Close(ctx))
	_, err = coll.InsertOne(ctx, bson.M{"k2": 2})
	require.True(t, mongodb.IsUnavailable(err), "%v", err)
}
func uniqueK() mongo.IndexModel {
	return mongo.IndexModel{Keys: bson.M{"k2": 1}, Options: options.Index().SetUnique(true)}
}
