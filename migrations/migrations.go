// Package migrations owns the PostgreSQL schema (numbered SQL files embedded
// with go:embed and applied by goose) and the MongoDB index definitions.
// Both are idempotent: applying them twice changes nothing.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/256dpi/lungo"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/outbox"
)

//go:embed postgres/*.sql
var postgresFiles embed.FS

// OutboxRetentionDefault is how long a dispatched outbox entry is kept.
const OutboxRetentionDefault = 24 * time.Hour

// Index names, so the reconciler and tests can refer to them.
const (
	IndexIdempotencyKey = "idempotencyKey_unique"
	IndexReconciler     = "reconciler"
	IndexUndispatched   = "undispatched"
	IndexOutboxTTL      = "dispatched_ttl"
)

// Postgres applies every pending PostgreSQL migration to the database at
// url, under a session advisory lock so concurrent callers are safe. It
// returns how many migrations it applied.
func Postgres(ctx context.Context, url string) (int, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return 0, fmt.Errorf("error opening PostgreSQL: %w", err)
	}
	defer db.Close()
	sub, err := fs.Sub(postgresFiles, "postgres")
	if err != nil {
		return 0, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("error loading migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("error applying PostgreSQL migrations: %w", err)
	}
	return len(res), nil
}

// MongoConfig configures the MongoDB indexes. A nil config means defaults.
type MongoConfig struct {
	// OutboxRetention is how long a dispatched outbox entry is kept before
	// its TTL index removes it. Defaults to OutboxRetentionDefault.
	OutboxRetention time.Duration
}

// Mongo creates the MongoDB indexes. An index whose options changed (the
// outbox retention) is dropped and created again.
func Mongo(ctx context.Context, db lungo.IDatabase, cfg *MongoConfig) error {
	retention := OutboxRetentionDefault
	if cfg != nil && cfg.OutboxRetention > 0 {
		retention = cfg.OutboxRetention
	}
	indexes := map[string][]mongo.IndexModel{
		outbox.EventsCollection: {
			{Keys: bson.D{{Key: "idempotencyKey", Value: 1}}, Options: options.Index().SetName(IndexIdempotencyKey).SetUnique(true)},
			// Serves the reconciler: equality on syncedAt and syncFailure
			// (null), range and sort on createdAt, then lastRequeuedAt.
			{Keys: bson.D{{Key: "syncedAt", Value: 1}, {Key: "syncFailure", Value: 1}, {Key: "createdAt", Value: 1}, {Key: "lastRequeuedAt", Value: 1}},
				Options: options.Index().SetName(IndexReconciler)},
		},
		outbox.OutboxCollection: {
			// Catch-up: undispatched entries, oldest first.
			{Keys: bson.D{{Key: "dispatchedAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(IndexUndispatched)},
			// Retention: TTL ignores documents whose dispatchedAt is null.
			{Keys: bson.D{{Key: "dispatchedAt", Value: 1}}, Options: options.Index().SetName(IndexOutboxTTL).
				SetExpireAfterSeconds(int32(retention / time.Second))},
		},
	}
	for coll, models := range indexes {
		view := db.Collection(coll).Indexes()
		for _, m := range models {
			if err := ensureIndex(ctx, view, m); err != nil {
				return fmt.Errorf("error creating index %s.%s: %w", coll, *m.Options.Name, err)
			}
		}
	}
	return nil
}

func ensureIndex(ctx context.Context, view lungo.IIndexView, m mongo.IndexModel) error {
	name := *m.Options.Name
	cur, err := view.List(ctx)
	if err != nil {
		return err
	}
	var specs []bson.M
	if err := cur.All(ctx, &specs); err != nil {
		return err
	}
	for _, s := range specs {
		if s["name"] != name {
			continue
		}
		if m.Options.ExpireAfterSeconds == nil || toInt64(s["expireAfterSeconds"]) == int64(*m.Options.ExpireAfterSeconds) {
			return nil
		}
		if _, err := view.DropOne(ctx, name); err != nil {
			return err
		}
	}
	_, err = view.CreateOne(ctx, m)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == 85 { // IndexOptionsConflict: created concurrently
		return nil
	}
	return err
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return -1
}

// PostgresFiles returns the embedded SQL migrations (file names at the root).
func PostgresFiles() fs.FS {
	sub, _ := fs.Sub(postgresFiles, "postgres")
	return sub
}
