package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
)

// readStmt returns the statement of q prepared on the read pool, preparing
// it on first use; database/sql then prepares it once on each read
// connection it runs on and keeps it there. The hot reads use it — the
// feed, which a dispatcher runs after every commit, and the worker's load
// of its batch's originals — so that they do not parse their SQL each time
// (a third of a feed read's CPU in a profile of outboxd dev under single
// events). Call it before a read transaction begins, and use the statement
// in it with tx.StmtContext: preparing takes a connection of the read
// pool, and readers that each held one while they prepared would wait for
// each other once the pool is spent.
func (s *Store) readStmt(ctx context.Context, q string) (*sql.Stmt, error) {
	v, ok := s.readStmts.Load(q)
	if !ok {
		if s.closed.Load() {
			return nil, errors.New("sql: database is closed")
		}
		st, err := s.read.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		if v, ok = s.readStmts.LoadOrStore(q, st); ok {
			_ = st.Close() // prepared concurrently: keep the first
		} else {
			v = st
		}
	}
	return v.(*sql.Stmt), nil
}

// closeReadStmts closes the statements readStmt prepared.
func (s *Store) closeReadStmts() {
	s.readStmts.Range(func(q, v any) bool {
		_ = v.(*sql.Stmt).Close()
		s.readStmts.Delete(q)
		return true
	})
}
