package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// PendingFilter matches the originals still on their way: neither synced
// nor parked with a syncFailure.
func PendingFilter() bson.D {
	return bson.D{{Key: "syncedAt", Value: nil}, {Key: "syncFailure", Value: nil}}
}

// OldestPending returns the createdAt of the oldest pending original, and
// false when none is pending.
func OldestPending(ctx context.Context, db lungo.IDatabase) (time.Time, bool, error) {
	var oldest struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	err := db.Collection(EventsCollection).FindOne(ctx, PendingFilter(), options.FindOne().
		SetSort(bson.D{{Key: "createdAt", Value: 1}}).SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Decode(&oldest)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	}
	return oldest.CreatedAt, true, nil
}
