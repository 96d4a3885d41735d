// Package pgerr reads PostgreSQL's errors as pgx returns them: the one
// place that unwraps a *pgconn.PgError for its SQLSTATE.
package pgerr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code returns the SQLSTATE of a PostgreSQL error in err's chain, "" when
// it holds none (nil, a network error, a cancelled context).
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
