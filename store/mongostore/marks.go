package mongostore

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// markID is the _id of the settings document that holds mark name.
func markID(name string) string { return "mark:" + name }

// SetMark records at as the time of mark name unless a later one is
// recorded: one upsert with $max, so a mark only moves forward.
func (s *Store) SetMark(ctx context.Context, name string, at time.Time) error {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	_, err := s.settings.UpdateOne(ctx, bson.M{"_id": markID(name)},
		bson.M{"$max": bson.M{"at": at.UTC().Truncate(time.Millisecond)}}, options.Update().SetUpsert(true))
	return wrap(err, "setting mark %s", name)
}

// Mark returns the time of mark name, or nil when it was never set.
func (s *Store) Mark(ctx context.Context, name string) (*time.Time, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	var d struct {
		At time.Time `bson:"at"`
	}
	err := s.settings.FindOne(ctx, bson.M{"_id": markID(name)}).Decode(&d)
	if isNoDocuments(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading mark %s", name)
	}
	at := d.At.UTC()
	return &at, nil
}
