package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The statements of the marks table (migration 00011), by its primary key:
// a mark only moves forward.
const (
	qMark    = `SELECT at FROM marks WHERE name = ?`
	qSetMark = `INSERT INTO marks (name, at) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET at = max(at, excluded.at)`
)

// SetMark records at as the time of mark name unless a later one is
// recorded, in one statement.
func (s *Store) SetMark(ctx context.Context, name string, at time.Time) error {
	if _, err := s.write.ExecContext(ctx, qSetMark, name, millis(at)); err != nil {
		return s.fail(fmt.Sprintf("setting mark %s", name), err)
	}
	return nil
}

// Mark returns the time of mark name, or nil when it was never set.
func (s *Store) Mark(ctx context.Context, name string) (*time.Time, error) {
	var ms int64
	err := s.read.QueryRowContext(ctx, qMark, name).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("reading mark %s", name), err)
	}
	at := fromMillis(ms)
	return &at, nil
}
