package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/store"
)

// The statements of the partitions table (migration 00009), by its primary
// key.
const (
	qPartitions       = `SELECT n FROM partitions WHERE stream = ?`
	qRecordPartitions = `INSERT INTO partitions (stream, n) VALUES (?, ?)
		ON CONFLICT (stream) DO UPDATE SET n = excluded.n`
)

// Partitions returns the number of partitions recorded for stream, 0 when
// none was recorded.
func (s *Store) Partitions(ctx context.Context, stream string) (int, error) {
	n, err := s.partitions(ctx, s.read, stream)
	if err != nil {
		return 0, s.fail(fmt.Sprintf("reading the partitions of stream %s", stream), err)
	}
	return n, nil
}

func (s *Store) partitions(ctx context.Context, q querier, stream string) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, qPartitions, stream).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// RecordPartitions records n partitions for stream in one write
// transaction that first checks that was is recorded (0: none).
func (s *Store) RecordPartitions(ctx context.Context, stream string, was, n int) error {
	what := fmt.Sprintf("recording the partitions of stream %s", stream)
	if n < 1 {
		return fmt.Errorf("error %s: the number must be positive, got %d", what, n)
	}
	return s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		got, err := s.partitions(ctx, tx, stream)
		if err != nil {
			return s.fail(what, err)
		}
		if got != was {
			return fmt.Errorf("error %s: %w: %d recorded, %d expected", what, store.ErrPartitionsChanged, got, was)
		}
		if _, err := tx.ExecContext(ctx, qRecordPartitions, stream, n); err != nil {
			return s.fail(what, err)
		}
		return nil
	})
}
