package pgerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/pgerr"
)

func TestCode(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("error projecting: %w", &pgconn.PgError{Code: "22P05"})
	require.Equal(t, "22P05", pgerr.Code(wrapped))
	require.Empty(t, pgerr.Code(nil))
	require.Empty(t, pgerr.Code(context.Canceled))
	require.Empty(t, pgerr.Code(errors.New("connection reset")))
}
