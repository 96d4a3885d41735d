package readmodel

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/outbox"
)

// Checker is what Keyed needs of a projector: which of ids its read model
// holds, read through tx (worker.Checker; a SQL projection file with a
// `-- key:` line is one).
type Checker interface {
	Projected(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error)
}

// typeChecker is a Checker whose read model holds rows of some event
// types only (worker.TypeChecker).
type typeChecker interface {
	Checks(eventType string) bool
}

// unprojector is a Checker that can also remove originals' rows
// (worker.Unprojector).
type unprojector interface {
	Unproject(ctx context.Context, tx pgx.Tx, ids []string) (int64, error)
}

// recomputer is a Checker that can also recompute what it derives from
// originals' rows (worker.Recomputer).
type recomputer interface {
	Recompute(ctx context.Context, tx pgx.Tx, events []*outbox.Event) (int, error)
}

// Keyed is a read model other than the demo tables as the operator actions
// use it: verify, the audit and verify --repair learn from its projector
// which originals it holds (Projected), and nothing more (its rows and
// whatever it derives from them are its own). It records the audit's runs
// like DB. It is safe for concurrent use.
type Keyed struct {
	db      *DB
	checker Checker
}

// NewKeyed returns the read model that checker answers for, over pool.
func NewKeyed(pool *pgxpool.Pool, checker Checker) *Keyed {
	return &Keyed{db: New(pool), checker: checker}
}

// Ping checks that PostgreSQL answers.
func (k *Keyed) Ping(ctx context.Context) error { return k.db.Ping(ctx) }

// Projected returns those of ids that the read model holds, in a
// read-only transaction.
func (k *Keyed) Projected(ctx context.Context, ids []string) (map[string]bool, error) {
	var out map[string]bool
	err := k.db.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		var err error
		out, err = k.checker.Projected(ctx, tx, ids)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading %d originals' rows: %w", len(ids), err)
	}
	return out, nil
}

// Checks reports whether the read model holds rows of the originals of
// eventType: what the projector says (worker.TypeChecker), every type
// when it does not say.
func (k *Keyed) Checks(eventType string) bool {
	tc, ok := k.checker.(typeChecker)
	return !ok || tc.Checks(eventType)
}

// CanUnproject reports whether the projector can remove originals' rows
// (replay --rebuild).
func (k *Keyed) CanUnproject() bool {
	_, ok := k.checker.(unprojector)
	return ok
}

// Unproject removes the rows of ids through the projector, in one
// transaction; it fails when the projector cannot (CanUnproject).
func (k *Keyed) Unproject(ctx context.Context, ids []string) (int64, error) {
	u, ok := k.checker.(unprojector)
	if !ok {
		return 0, fmt.Errorf("this read model's projector cannot remove rows")
	}
	var n int64
	err := k.db.inTx(ctx, pgx.ReadWrite, func(tx pgx.Tx) error {
		var err error
		n, err = u.Unproject(ctx, tx, ids)
		return err
	})
	return n, err
}

// Recompute sets what the read model derives from the rows of events to
// what its rows say, through the projector, in one transaction (retried
// after a serialization failure or deadlock), and returns how many of
// events it recomputed for: 0 when the projector has nothing to recompute
// (it is no worker.Recomputer, or a projection file without -- recompute:
// statements).
func (k *Keyed) Recompute(ctx context.Context, events []*outbox.Event) (int, error) {
	r, ok := k.checker.(recomputer)
	if !ok || len(events) == 0 {
		return 0, nil
	}
	var n int
	err := k.db.inTx(ctx, pgx.ReadWrite, func(tx pgx.Tx) error {
		var err error
		n, err = r.Recompute(ctx, tx, events)
		return err
	})
	return n, err
}

// AuditRecordable reports whether the audit's table is in the database
// (DB.AuditRecordable).
func (k *Keyed) AuditRecordable(ctx context.Context) (bool, error) { return k.db.AuditRecordable(ctx) }

// SaveAudit records the audit's last run (DB.SaveAudit).
func (k *Keyed) SaveAudit(ctx context.Context, stream string, ranAt time.Time, report []byte) error {
	return k.db.SaveAudit(ctx, stream, ranAt, report)
}

// LastAudit reads the audit's last run (DB.LastAudit).
func (k *Keyed) LastAudit(ctx context.Context, stream string) ([]byte, error) {
	return k.db.LastAudit(ctx, stream)
}
