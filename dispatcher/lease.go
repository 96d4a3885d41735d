package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/mongodb"
)

// ErrFenced is returned when a write of the leader matched no state document
// because another dispatcher has taken the lease with a newer term.
var ErrFenced = errors.New("fenced out: another dispatcher holds the stream's lease with a newer term")

// errLeaseExpired ends a leadership whose lease could not be renewed in time.
var errLeaseExpired = errors.New("lease expired before it could be renewed")

// releasedAt is the leaseExpiresAt of a released lease: long past.
var releasedAt = time.Unix(0, 0).UTC()

// acquire takes the stream's lease when it is free, expired or already ours,
// incrementing the fencing term. It returns 0 and no error when another
// dispatcher holds the lease.
func (d *Dispatcher) acquire(ctx context.Context) (int64, error) {
	now := d.cfg.Clock.Now().UTC()
	expires := now.Add(d.cfg.LeaseTTL)
	filter := bson.M{"_id": d.cfg.Stream, "$or": bson.A{
		bson.M{"leaseExpiresAt": bson.M{"$lte": now}},
		bson.M{"owner": d.cfg.Owner},
	}}
	update := bson.M{
		"$set": bson.M{"owner": d.cfg.Owner, "leaseExpiresAt": expires},
		"$inc": bson.M{"term": int64(1)},
	}
	var st State
	err := d.state.FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&st)
	if err == nil {
		d.setLeaseExpiry(expires)
		return st.Term, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, fmt.Errorf("error taking the dispatcher lease: %w", err)
	}
	// Either nobody ever led this stream, or someone holds the lease. The
	// insert tells which: a duplicate key means the document exists.
	_, err = d.state.InsertOne(ctx, bson.M{
		"_id": d.cfg.Stream, "owner": d.cfg.Owner, "leaseExpiresAt": expires, "term": int64(1),
		"checkpointAt": nil,
	})
	switch {
	case err == nil:
		d.setLeaseExpiry(expires)
		return 1, nil
	case mongodb.IsDuplicateKey(err):
		return 0, nil
	default:
		return 0, fmt.Errorf("error creating the dispatcher state: %w", err)
	}
}

// renew extends the lease of term, or returns ErrFenced.
func (d *Dispatcher) renew(ctx context.Context, term int64) error {
	expires := d.cfg.Clock.Now().UTC().Add(d.cfg.LeaseTTL)
	res, err := d.state.UpdateOne(ctx,
		bson.M{"_id": d.cfg.Stream, "owner": d.cfg.Owner, "term": term},
		bson.M{"$set": bson.M{"leaseExpiresAt": expires}})
	if err != nil {
		return fmt.Errorf("error renewing the dispatcher lease: %w", err)
	}
	if res.MatchedCount == 0 {
		return ErrFenced
	}
	d.setLeaseExpiry(expires)
	return nil
}

// release gives the lease of term up so that a standby takes over at once.
func (d *Dispatcher) release(ctx context.Context, term int64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := d.state.UpdateOne(ctx,
		bson.M{"_id": d.cfg.Stream, "owner": d.cfg.Owner, "term": term},
		bson.M{"$set": bson.M{"owner": "", "leaseExpiresAt": releasedAt}})
	switch {
	case err != nil:
		d.logger.Warn("Error releasing the lease; a standby takes over when it expires", zap.Int64("term", term), zap.Error(err))
	case res.MatchedCount == 0:
		d.logger.Info("Lease already taken over", zap.Int64("term", term))
	default:
		d.logger.Info("Released the lease", zap.Int64("term", term))
	}
}

// keepLease renews the lease of term every LeaseTTL/3 until ctx ends. When
// another dispatcher fenced it out, or the lease ran out before a renewal
// succeeded, it cancels the leadership with the reason.
func (d *Dispatcher) keepLease(ctx context.Context, term int64, cancel context.CancelCauseFunc) {
	ticker := time.NewTicker(d.leaseInterval())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		err := d.renew(ctx, term)
		switch {
		case err == nil:
		case errors.Is(err, ErrFenced):
			cancel(ErrFenced)
			return
		case ctx.Err() != nil:
			return
		default:
			d.logger.Warn("Error renewing the lease", zap.Int64("term", term), zap.Error(err))
			if !d.cfg.Clock.Now().Before(d.leaseExpiry()) {
				cancel(errLeaseExpired)
				return
			}
		}
	}
}

func (d *Dispatcher) leaseInterval() time.Duration { return d.cfg.LeaseTTL / 3 }

func (d *Dispatcher) setLeaseExpiry(t time.Time) { d.leaseExpires.Store(t.UnixNano()) }

func (d *Dispatcher) leaseExpiry() time.Time { return time.Unix(0, d.leaseExpires.Load()) }
