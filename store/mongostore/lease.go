package mongostore

import (
	"context"
	"fmt"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/store"
)

// releasedAt is the leaseExpiresAt of a released lease: long past.
var releasedAt = time.Unix(0, 0).UTC()

// leaseDoc is a lease as stored; the dispatcher's also holds its
// checkpoint.
type leaseDoc struct {
	Name           string     `bson:"_id"`
	Owner          string     `bson:"owner"`
	LeaseExpiresAt time.Time  `bson:"leaseExpiresAt"`
	Term           int64      `bson:"term"`
	CheckpointAt   *time.Time `bson:"checkpointAt"`
}

func (d *leaseDoc) lease() store.Lease {
	return store.Lease{Name: d.Name, Owner: d.Owner, Term: d.Term, Expires: d.LeaseExpiresAt.UTC()}
}

// leaseTime returns the time a lease decision of a caller whose clock
// reads now is made with: the server's clock (serverNow), moved by how far
// now is from this process's clock. In production the caller passes its
// clock's now, so every replica decides with the server's clock however
// far its own has drifted (clocks differ between replicas: lease times
// come from the store's clock); a test's fake clock moves lease time as
// far as it moves. The server read its clock at some moment of the round
// trip: $currentDate runs when the write applies, before the majority
// wait, so the reading can be anywhere from the send to the reply. It is
// taken as read at the send, the earliest it can have been: a lease's
// expiry is then never earlier, on the server's clock, than its holder's
// (now + ttl on the caller's clock), so a standby never takes over while
// the holder still believes it leads, however slow the majority (the
// midpoint, taken before, let a standby take over half the round trip
// early).
func (s *Store) leaseTime(ctx context.Context, now time.Time) (time.Time, error) {
	sent := time.Now()
	server, err := s.serverNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return server.Add(now.Sub(sent)).UTC().Truncate(time.Millisecond), nil
}

// AcquireLease takes a free, expired or own lease with one conditional
// FindOneAndUpdate, expiry judged by the server's clock (leaseTime); a
// missing lease document is created (a duplicate key then means another
// owner created it first). The lease's Expires is now+ttl on the caller's
// clock: the caller measured from before its request left, so it stops
// believing it leads no later than the server lets a standby take over.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	at, err := s.leaseTime(ctx, now)
	if err != nil {
		return store.Lease{}, wrap(err, "reading the server's clock for lease %s", name)
	}
	expires := at.Add(ttl)
	mine := now.Add(ttl)
	filter := bson.M{"_id": name, "$or": bson.A{
		bson.M{"leaseExpiresAt": bson.M{"$lte": at}},
		bson.M{"owner": owner},
	}}
	update := bson.M{
		"$set": bson.M{"owner": owner, "leaseExpiresAt": expires},
		"$inc": bson.M{"term": int64(1)},
	}
	var d leaseDoc
	err = s.leases.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	if err == nil {
		l := d.lease()
		l.Expires = mine
		return l, nil
	}
	if !isNoDocuments(err) {
		return store.Lease{}, wrap(err, "taking lease %s", name)
	}
	_, err = s.leases.InsertOne(ctx, bson.M{"_id": name, "owner": owner, "leaseExpiresAt": expires, "term": int64(1), "checkpointAt": nil})
	switch {
	case err == nil:
		return store.Lease{Name: name, Owner: owner, Term: 1, Expires: mine}, nil
	case classify(err) == classDuplicateKey:
		return store.Lease{Name: name}, nil
	default:
		return store.Lease{}, wrap(err, "creating lease %s", name)
	}
}

// RenewLease extends the lease, by the server's clock, while owner and
// term still match; Expires is now+ttl on the caller's clock (see
// AcquireLease).
func (s *Store) RenewLease(ctx context.Context, lease store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	at, err := s.leaseTime(ctx, now)
	if err != nil {
		return lease, wrap(err, "reading the server's clock for lease %s", lease.Name)
	}
	res, err := s.leases.UpdateOne(ctx, bson.M{"_id": lease.Name, "owner": lease.Owner, "term": lease.Term},
		bson.M{"$set": bson.M{"leaseExpiresAt": at.Add(ttl)}})
	if err != nil {
		return lease, wrap(err, "renewing lease %s", lease.Name)
	}
	if res.MatchedCount == 0 {
		return lease, fmt.Errorf("renewing lease %s term %d: %w", lease.Name, lease.Term, store.ErrFenced)
	}
	lease.Expires = now.Add(ttl)
	return lease, nil
}

// ReleaseLease expires the lease at once while owner and term match.
func (s *Store) ReleaseLease(ctx context.Context, lease store.Lease) (bool, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	res, err := s.leases.UpdateOne(ctx, bson.M{"_id": lease.Name, "owner": lease.Owner, "term": lease.Term},
		bson.M{"$set": bson.M{"owner": "", "leaseExpiresAt": releasedAt}})
	if err != nil {
		return false, wrap(err, "releasing lease %s", lease.Name)
	}
	return res.MatchedCount == 1, nil
}

// ReadLease reads a lease document. The resume token is read apart, so a
// corrupt one cannot make the whole state unreadable: it counts as lost.
// Expires is leaseExpiresAt as stored, on the server's clock.
func (s *Store) ReadLease(ctx context.Context, name string) (*store.LeaseState, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	var raw bson.Raw
	err := s.leases.FindOne(ctx, bson.M{"_id": name}).Decode(&raw)
	if isNoDocuments(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading lease %s", name)
	}
	var d leaseDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%w: lease %s: %w", store.ErrCorrupt, name, err)
	}
	st := &store.LeaseState{Name: d.Name, Owner: d.Owner, Term: d.Term, Expires: d.LeaseExpiresAt.UTC(), CheckpointAt: utcp(d.CheckpointAt)}
	if v, err := raw.LookupErr("resumeToken"); err == nil && v.Type != bson.TypeNull {
		if doc, ok := v.DocumentOK(); ok {
			st.Position = store.Position(doc)
		} else {
			st.PositionInvalid = true
		}
	}
	return st, nil
}

// SaveCheckpoint writes the checkpoint under the lease's owner and term.
func (s *Store) SaveCheckpoint(ctx context.Context, lease store.Lease, cp store.Checkpoint) error {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	res, err := s.leases.UpdateOne(ctx, bson.M{"_id": lease.Name, "owner": lease.Owner, "term": lease.Term}, checkpointUpdate(cp, bson.M{}))
	if err != nil {
		return wrap(err, "writing the checkpoint of %s", lease.Name)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("writing the checkpoint of %s term %d: %w", lease.Name, lease.Term, store.ErrFenced)
	}
	return nil
}

// checkpointUpdate is the update of the lease document that records cp,
// setting the fields of set too.
func checkpointUpdate(cp store.Checkpoint, set bson.M) bson.M {
	update := bson.M{}
	set["checkpointAt"] = cp.At.UTC()
	switch {
	case cp.Position != nil:
		set["resumeToken"] = bson.Raw(cp.Position)
	case cp.Forget:
		update["$unset"] = bson.M{"resumeToken": ""}
	}
	update["$set"] = set
	return update
}

// fencedTx runs fn in a transaction that first writes the lease document
// under its owner and term (leaseUpdate: at least a field of its own, such
// as fencedAt): a take-over committed before fails it with ErrFenced, one
// running at the same time conflicts with it.
func (s *Store) fencedTx(ctx context.Context, lease store.Lease, leaseUpdate bson.M, fn func(sc lungo.ISessionContext) error) error {
	return s.runTx(ctx, "writing under lease "+lease.Name, func(sc lungo.ISessionContext) error {
		res, err := s.leases.UpdateOne(sc, bson.M{"_id": lease.Name, "owner": lease.Owner, "term": lease.Term}, leaseUpdate)
		if err != nil {
			return wrap(err, "fencing lease %s", lease.Name)
		}
		if res.MatchedCount == 0 {
			return fmt.Errorf("lease %s term %d: %w", lease.Name, lease.Term, store.ErrFenced)
		}
		return fn(sc)
	})
}
