package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/outboxd/outboxd/outbox"
)

// State is the dispatcher state document of one stream, in
// outbox.DispatcherCollection.
type State struct {
	// Stream is the document's _id.
	Stream string `bson:"_id"`
	// Owner holds the lease; empty once released.
	Owner string `bson:"owner"`
	// LeaseExpiresAt is when a standby may take the lease over.
	LeaseExpiresAt time.Time `bson:"leaseExpiresAt"`
	// Term is the fencing term, incremented by every acquisition.
	Term int64 `bson:"term"`
	// ResumeToken is the change-stream position up to which every outbox
	// entry is in the stream; nil when unknown (start from now after a
	// catch-up).
	ResumeToken bson.Raw `bson:"-"`
	// resumeTokenInvalid is set when resumeToken holds something other
	// than a document (corrupt).
	resumeTokenInvalid bool
	// CheckpointAt is when the leader last wrote a checkpoint.
	CheckpointAt *time.Time `bson:"checkpointAt"`
}

// ReadState returns the state document of stream, or nil when no dispatcher
// ever led it.
func ReadState(ctx context.Context, db lungo.IDatabase, stream string) (*State, error) {
	var raw bson.Raw
	err := db.Collection(outbox.DispatcherCollection).FindOne(ctx, bson.M{"_id": stream}).Decode(&raw)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("error reading the dispatcher state of %s: %w", stream, err)
	}
	var st State
	if err := bson.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("error decoding the dispatcher state of %s: %w", stream, err)
	}
	// The token is read apart so that a corrupt one cannot make the whole
	// state unreadable: it counts as a lost position instead.
	if v, err := raw.LookupErr("resumeToken"); err == nil && v.Type != bson.TypeNull {
		if doc, ok := v.DocumentOK(); ok {
			st.ResumeToken = doc
		} else {
			st.resumeTokenInvalid = true
		}
	}
	return &st, nil
}

// checkpoint records that everything up to token is in the stream. A nil
// token keeps the saved one (an idle embedded stream has none) unless forget
// is set (the saved one is lost: start from now next time). The write is
// fenced by term: it returns ErrFenced when a newer leader exists.
func (d *Dispatcher) checkpoint(ctx context.Context, term int64, token bson.Raw, forget bool) error {
	now := d.cfg.Clock.Now().UTC()
	update := bson.M{}
	set := bson.M{"checkpointAt": now}
	switch {
	case token != nil:
		set["resumeToken"] = token
	case forget:
		update["$unset"] = bson.M{"resumeToken": ""}
	}
	update["$set"] = set
	res, err := d.state.UpdateOne(ctx, bson.M{"_id": d.cfg.Stream, "term": term}, update)
	if err != nil {
		return fmt.Errorf("error writing the checkpoint: %w", err)
	}
	if res.MatchedCount == 0 {
		return ErrFenced
	}
	d.metrics.checkpoint.Set(float64(now.UnixMilli()) / 1e3)
	return nil
}
