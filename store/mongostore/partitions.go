package mongostore

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/store"
)

// partitionsID is the _id of the settings document that records stream's
// number of partitions.
func partitionsID(stream string) string { return "partitions:" + stream }

// Partitions returns the number of partitions recorded for stream, 0 when
// none was recorded.
func (s *Store) Partitions(ctx context.Context, stream string) (int, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	var d struct {
		N int `bson:"n"`
	}
	err := s.settings.FindOne(ctx, bson.M{"_id": partitionsID(stream)}).Decode(&d)
	if isNoDocuments(err) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap(err, "reading the partitions of stream %s", stream)
	}
	return d.N, nil
}

// RecordPartitions records n partitions for stream with one conditional
// write: an update while was is recorded, or an insert when was is 0 (a
// duplicate key then means another process recorded first).
func (s *Store) RecordPartitions(ctx context.Context, stream string, was, n int) error {
	if n < 1 {
		return fmt.Errorf("error recording the partitions of stream %s: the number must be positive, got %d", stream, n)
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	id := partitionsID(stream)
	if was == 0 {
		_, err := s.settings.InsertOne(ctx, bson.M{"_id": id, "n": n})
		if err != nil && classify(err) == classDuplicateKey {
			return fmt.Errorf("error recording the partitions of stream %s: %w: another process recorded them first", stream, store.ErrPartitionsChanged)
		}
		return wrap(err, "recording the partitions of stream %s", stream)
	}
	res, err := s.settings.UpdateOne(ctx, bson.M{"_id": id, "n": was}, bson.M{"$set": bson.M{"n": n}})
	if err != nil {
		return wrap(err, "recording the partitions of stream %s", stream)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("error recording the partitions of stream %s: %w: %d is not recorded", stream, store.ErrPartitionsChanged, was)
	}
	return nil
}
