package mongostore

import (
	"context"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/store"
)

// MarkRelayed marks the entries ids dispatched at cp.At and records cp in
// the lease document, in one transaction: the lease document's write
// (under its owner and term, so a take-over fails it with store.ErrFenced
// or conflicts with it) carries the checkpoint, then the entries' update.
// A relayed batch costs one update fewer, outside the transaction, than
// MarkDispatched then SaveCheckpoint.
func (s *Store) MarkRelayed(ctx context.Context, lease store.Lease, ids []string, cp store.Checkpoint) error {
	oids := objectIDs(ids)
	return s.fencedTx(ctx, lease, checkpointUpdate(cp, bson.M{"fencedAt": cp.At.UTC()}), func(sc lungo.ISessionContext) error {
		return s.markDispatched(sc, oids, cp.At)
	})
}
