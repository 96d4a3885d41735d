// Package testkit gives every test its own stores: a fresh SQLite store in
// a temporary folder (the default store of component tests), a fresh
// MongoDB store on lungo's in-memory engine (or a uniquely named database
// on the replica set named by OUTBOXD_TEST_MONGO_URI), unique Redis key
// names, and a fresh PostgreSQL database cloned from a migrated template.
// Tests using it can run with t.Parallel().
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// Environment variables that point the tests at other servers.
const (
	EnvMongoURI    = "OUTBOXD_TEST_MONGO_URI"
	EnvRedisURL    = "OUTBOXD_TEST_REDIS_URL"
	EnvPostgresURL = "OUTBOXD_TEST_POSTGRES_URL"
	EnvLog         = "OUTBOXD_TEST_LOG"
)

// Defaults match what `make test` sets up.
const (
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	PostgresURLDefault = "postgres://outboxd:outboxd@127.0.0.1:5432/outboxd?sslmode=disable"
)

// ID returns a short random hex id for unique names.
func ID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Name returns a unique name with prefix, for streams, groups and databases.
func Name(prefix string) string { return prefix + "_" + ID() }

// FreeAddr returns a loopback address whose port is free now, for a
// server or a subprocess to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// Logger returns a no-op logger, or a development logger on stderr when
// OUTBOXD_TEST_LOG is set.
func Logger(t testing.TB) *zap.Logger {
	if os.Getenv(EnvLog) == "" {
		return zap.NewNop()
	}
	l, err := zap.NewDevelopment()
	require.NoError(t, err)
	return l.With(zap.String("test", t.Name()))
}

// NewStore returns the default store of component tests: a fresh, migrated
// SQLite store.
func NewStore(t testing.TB) store.Store { return NewSQLite(t) }

// NewSQLite returns a fresh, migrated SQLite store in a temporary folder,
// closed at cleanup. Path() names its file, for a second Store (standing in
// for a second process) or a subprocess.
func NewSQLite(t testing.TB) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	require.NoError(t, s.Migrate(ctx, nil))
	return s
}

// RealMongo reports whether OUTBOXD_TEST_MONGO_URI names a replica set.
func RealMongo() bool { return os.Getenv(EnvMongoURI) != "" }

// MongoURI returns the store URI of Mongo tests: the replica set of
// OUTBOXD_TEST_MONGO_URI, or lungo's in-memory engine.
func MongoURI() string {
	if uri := os.Getenv(EnvMongoURI); uri != "" {
		return uri
	}
	return mongostore.LungoMemory
}

// NewMongo returns a fresh, migrated MongoDB store: lungo's in-memory engine,
// or a database of its own on the replica set of OUTBOXD_TEST_MONGO_URI
// (dropped at cleanup). Counts are not cached. opts tune it (the database
// name is chosen here).
func NewMongo(t testing.TB, opts *mongostore.Options) *mongostore.Store {
	t.Helper()
	ctx := context.Background()
	o := mongostore.Options{}
	if opts != nil {
		o = *opts
	}
	if o.CountsTTL == 0 {
		o.CountsTTL = -1
	}
	o.Database = mongostore.DatabaseDefault
	if RealMongo() {
		o.Database = Name("outboxd_test")
	}
	s, err := mongostore.Open(ctx, MongoURI(), &o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if RealMongo() {
			_ = mongoseam.Database(s).Drop(context.Background())
		}
		_ = s.Close(context.Background())
	})
	require.NoError(t, s.Migrate(ctx, nil))
	return s
}

// SkipUnlessRealMongo skips t unless OUTBOXD_TEST_MONGO_URI names a replica set.
func SkipUnlessRealMongo(t testing.TB) {
	if !RealMongo() {
		t.Skipf("skipped: needs a real replica set in %s", EnvMongoURI)
	}
}

// RedisURL returns the test Redis URL.
func RedisURL() string { return envOr(EnvRedisURL, RedisURLDefault) }

// NewRedis returns a client on the test Redis; name keys with Name() so
// parallel tests never meet. Keys with the returned prefix are deleted at
// cleanup.
func NewRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	require.NoError(t, err)
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Ping(ctx).Err(), "Redis must run at %s (make test starts it)", RedisURL())
	prefix := Name("t")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c, prefix
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// withDatabase returns url with its database name replaced by db.
func withDatabase(url, db string) string {
	i := strings.Index(url, "://")
	rest := url[i+3:]
	slash := strings.Index(rest, "/")
	q := ""
	if j := strings.Index(rest, "?"); j >= 0 {
		q = rest[j:]
		if slash < 0 || slash > j {
			slash = j
		}
	}
	host := rest
	if slash >= 0 {
		host = rest[:slash]
	}
	return fmt.Sprintf("%s://%s/%s%s", url[:i], host, db, q)
}
