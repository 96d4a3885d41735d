package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxd/outboxd/store"
)

// MarkRelayed marks the entries ids dispatched at cp.At and records cp in
// lease's row in one write transaction: the checkpoint's UPDATE, which
// matches only while lease is held by its owner with its term (else the
// transaction rolls back and the error wraps store.ErrFenced), then the
// entries'. One commit per relayed batch instead of two. An id that is not
// an entry id of this store is an error.
func (s *Store) MarkRelayed(ctx context.Context, lease store.Lease, ids []string, cp store.Checkpoint) error {
	what := fmt.Sprintf("marking a relayed batch of lease %s", lease.Name)
	if err := checkEntryIDs(what, ids); err != nil {
		return err
	}
	return s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		if err := s.saveCheckpoint(ctx, tx, lease, cp); err != nil {
			return err
		}
		return s.markDispatched(ctx, tx, what, ids, cp.At)
	})
}
