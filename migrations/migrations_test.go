package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/migrations"
)

func TestPostgresTwice(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t) // already migrated from the template
	ctx := context.Background()
	n, err := migrations.Postgres(ctx, pg.URL)
	require.NoError(t, err)
	require.Equal(t, 0, n, "a second run applies nothing")
	var tables int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema='public' AND table_name IN ('events','device_daily_stats')`).Scan(&tables))
	require.Equal(t, 2, tables)
}
