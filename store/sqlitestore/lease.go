package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/store"
)

// Leases live in table leases, one row per name; every statement finds its
// row by the primary key. Times are compared in milliseconds: a lease whose
// expires_at is at or before now is expired.
const (
	qLeaseRead    = `SELECT owner, expires_at, term FROM leases WHERE name = ?`
	qLeaseAcquire = `INSERT INTO leases (name, owner, expires_at, term) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, term = excluded.term`
	qLeaseRenew   = `UPDATE leases SET expires_at = ? WHERE name = ? AND owner = ? AND term = ?`
	qLeaseRelease = `UPDATE leases SET owner = '', expires_at = 0 WHERE name = ? AND owner = ? AND term = ?`
	qLeaseState   = `SELECT owner, expires_at, term, position, checkpoint_at FROM leases WHERE name = ?`
	// SaveCheckpoint, by what happens to the position.
	qCheckpointSet    = `UPDATE leases SET checkpoint_at = ?, position = ? WHERE name = ? AND owner = ? AND term = ?`
	qCheckpointForget = `UPDATE leases SET checkpoint_at = ?, position = NULL WHERE name = ? AND owner = ? AND term = ?`
	qCheckpointKeep   = `UPDATE leases SET checkpoint_at = ? WHERE name = ? AND owner = ? AND term = ?`
	qLeaseCheck       = `SELECT owner, term FROM leases WHERE name = ?`
)

// AcquireLease takes lease name for owner until now+ttl when it is free (no
// row, or released), expired, or already owner's, incrementing its fencing
// term (a new lease starts at term 1); the saved checkpoint is kept. When
// another owner holds it, the result has Term 0, and Owner and Expires are
// the holder's.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	if owner == "" {
		return store.Lease{}, fmt.Errorf("error acquiring lease %s: empty owner", name)
	}
	expires := now.Add(ttl)
	var got store.Lease
	err := s.inWriteTx(ctx, fmt.Sprintf("acquiring lease %s", name), func(tx *sql.Tx) error {
		var holder string
		var holderExpires, term int64
		err := tx.QueryRowContext(ctx, qLeaseRead, name).
			Scan(&holder, &holderExpires, &term)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			term = 0
		case err != nil:
			return s.fail(fmt.Sprintf("acquiring lease %s", name), err)
		case holder != owner && holderExpires > millis(now):
			got = store.Lease{Name: name, Owner: holder, Term: 0, Expires: fromMillis(holderExpires)}
			return nil
		}
		_, err = tx.ExecContext(ctx, qLeaseAcquire, name, owner, millis(expires), term+1)
		if err != nil {
			return s.fail(fmt.Sprintf("acquiring lease %s", name), err)
		}
		got = store.Lease{Name: name, Owner: owner, Term: term + 1, Expires: fromMillis(millis(expires))}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return got, nil
}

// RenewLease extends lease until now+ttl, or returns an error wrapping
// store.ErrFenced when its owner no longer holds it with its term.
func (s *Store) RenewLease(ctx context.Context, lease store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	expires := now.Add(ttl)
	res, err := s.write.ExecContext(ctx, qLeaseRenew, millis(expires), lease.Name, lease.Owner, lease.Term)
	if err != nil {
		return store.Lease{}, s.fail(fmt.Sprintf("renewing lease %s", lease.Name), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Lease{}, s.fail(fmt.Sprintf("renewing lease %s", lease.Name), err)
	}
	if n == 0 {
		return store.Lease{}, fmt.Errorf("error renewing lease %s of %s (term %d): %w", lease.Name, lease.Owner, lease.Term, store.ErrFenced)
	}
	lease.Expires = fromMillis(millis(expires))
	return lease, nil
}

// ReleaseLease gives lease up while its owner holds it with its term: the
// row keeps its term and checkpoint, with no owner and expires_at 0 (long
// past). It reports whether it did.
func (s *Store) ReleaseLease(ctx context.Context, lease store.Lease) (bool, error) {
	res, err := s.write.ExecContext(ctx, qLeaseRelease, lease.Name, lease.Owner, lease.Term)
	if err != nil {
		return false, s.fail(fmt.Sprintf("releasing lease %s", lease.Name), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.fail(fmt.Sprintf("releasing lease %s", lease.Name), err)
	}
	return n > 0, nil
}

// ReadLease returns the state of lease name, or nil when it never existed.
// A saved position that is not a decimal seq sets PositionInvalid (Position
// then holds the stored bytes).
func (s *Store) ReadLease(ctx context.Context, name string) (*store.LeaseState, error) {
	st := store.LeaseState{Name: name}
	var expires int64
	var pos sql.NullString
	var cpAt sql.NullInt64
	err := s.read.QueryRowContext(ctx, qLeaseState, name).
		Scan(&st.Owner, &expires, &st.Term, &pos, &cpAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("reading lease %s", name), err)
	}
	st.Expires = fromMillis(expires)
	st.CheckpointAt = fromNullMillis(cpAt)
	if pos.Valid {
		st.Position = store.Position(pos.String)
		if seq, err := strconv.ParseInt(pos.String, 10, 64); err != nil || seq < 0 {
			st.PositionInvalid = true
		}
	}
	return &st, nil
}

// SaveCheckpoint records cp in lease's row while lease is held by its owner
// with its term (else the error wraps store.ErrFenced): position becomes
// cp.Position when not nil, NULL when cp.Forget, and stays otherwise;
// checkpoint_at becomes cp.At.
func (s *Store) SaveCheckpoint(ctx context.Context, lease store.Lease, cp store.Checkpoint) error {
	return s.saveCheckpoint(ctx, s.write, lease, cp)
}

// execer is a write connection pool or one of its transactions.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// saveCheckpoint is SaveCheckpoint on db (the write pool, or a write
// transaction).
func (s *Store) saveCheckpoint(ctx context.Context, db execer, lease store.Lease, cp store.Checkpoint) error {
	var q string
	args := []any{millis(cp.At)}
	switch {
	case cp.Position != nil:
		q = qCheckpointSet
		args = append(args, string(cp.Position))
	case cp.Forget:
		q = qCheckpointForget
	default:
		q = qCheckpointKeep
	}
	args = append(args, lease.Name, lease.Owner, lease.Term)
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return s.fail(fmt.Sprintf("saving checkpoint of lease %s", lease.Name), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.fail(fmt.Sprintf("saving checkpoint of lease %s", lease.Name), err)
	}
	if n == 0 {
		return fmt.Errorf("error saving checkpoint of lease %s of %s (term %d): %w", lease.Name, lease.Owner, lease.Term, store.ErrFenced)
	}
	return nil
}

// checkLease returns an error wrapping store.ErrFenced unless lease's row
// has its owner and term. Run it in the write transaction it guards.
func (s *Store) checkLease(ctx context.Context, tx *sql.Tx, lease store.Lease) error {
	var owner string
	var term int64
	err := tx.QueryRowContext(ctx, qLeaseCheck, lease.Name).Scan(&owner, &term)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("lease %s does not exist: %w", lease.Name, store.ErrFenced)
	}
	if err != nil {
		return s.fail(fmt.Sprintf("checking lease %s", lease.Name), err)
	}
	if lease.Term <= 0 || owner != lease.Owner || term != lease.Term {
		return fmt.Errorf("lease %s is held by %q with term %d, not by %q with term %d: %w", lease.Name, owner, term, lease.Owner, lease.Term, store.ErrFenced)
	}
	return nil
}
