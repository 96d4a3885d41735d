// Package testkit gives every test its own stores: a fresh embedded MongoDB
// engine (or a uniquely named database on the replica set named by
// OUTBOXD_TEST_MONGO_URI), unique Redis key names, and a fresh PostgreSQL
// database cloned from a migrated template. Tests using it can run with
// t.Parallel().
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/256dpi/lungo"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/mongodb"
	"github.com/outboxd/outboxd/migrations"
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

// Mongo is a test's MongoDB database with its indexes created.
type Mongo struct {
	Conn *mongodb.Conn
	DB   lungo.IDatabase
	// URI opens the same store again (a replica set URI, or "" for a
	// per-test embedded memory engine, which only this Conn can reach).
	URI string
	// Real is true on a real replica set.
	Real bool
}

// NewMongo opens a fresh database for t. opts tune the embedded engine and
// are ignored on a real replica set.
func NewMongo(t testing.TB, opts *mongodb.Options) *Mongo {
	t.Helper()
	ctx := context.Background()
	uri := os.Getenv(EnvMongoURI)
	m := &Mongo{URI: uri, Real: uri != ""}
	if uri == "" {
		uri = mongodb.EmbeddedMemory
	}
	conn, err := mongodb.Open(ctx, uri, opts)
	require.NoError(t, err)
	m.Conn = conn
	dbName := "outboxd"
	if m.Real {
		dbName = Name("outboxd_test")
	}
	m.DB = conn.Client.Database(dbName)
	require.NoError(t, migrations.Mongo(ctx, m.DB, nil))
	t.Cleanup(func() {
		if m.Real {
			_ = m.DB.Drop(context.Background())
		}
		_ = conn.Close(context.Background())
	})
	return m
}

// SkipUnlessRealMongo skips t unless OUTBOXD_TEST_MONGO_URI names a replica set.
func SkipUnlessRealMongo(t testing.TB) {
	if os.Getenv(EnvMongoURI) == "" {
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
