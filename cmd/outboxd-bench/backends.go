package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/redact"
	"github.com/outboxd/outboxd/internal/redisproc"
	"github.com/outboxd/outboxd/migrations"
)

// Defaults of the servers, outboxd's own (cmd/outboxd).
const (
	redisURLDefault    = "redis://127.0.0.1:6379/0"
	postgresURLDefault = "postgres://outboxd:outboxd@127.0.0.1:5432/outboxd?sslmode=disable"
)

// env returns the first non-empty of the variables names, or def.
func env(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

// newID returns a short random hex id for the names of one run.
func newID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// backends are the servers of one run and the names it owns on them: a
// PostgreSQL database, and the Redis keys under prefix.
type backends struct {
	id  string
	dir string
	// rdb is a single node's client, or a cluster's (useCluster).
	rdb      redis.UniversalClient
	redisURL string
	// cluster is the local Redis Cluster the run started (useCluster),
	// whose seed list is redisURL; nil on a single Redis.
	cluster *redisproc.Cluster
	// adminURL is the PostgreSQL database the run's own is created from.
	adminURL string
	pgURL    string
	pg       *pgxpool.Pool
	dbName   string
}

// openBackends creates the run's temporary folder and PostgreSQL database.
func openBackends(ctx context.Context) (*backends, error) {
	b := &backends{id: newID()}
	b.redisURL = env(redisURLDefault, "BENCH_REDIS_URL", "OUTBOXD_TEST_REDIS_URL")
	b.adminURL = env(postgresURLDefault, "BENCH_POSTGRES_URL", "OUTBOXD_TEST_POSTGRES_URL")
	opt, err := redis.ParseURL(b.redisURL)
	if err != nil {
		return nil, fmt.Errorf("error parsing the Redis URL: %w", err)
	}
	b.rdb = redis.NewClient(opt)
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis must run at %s (make services): %w", redact.DSN(b.redisURL), err)
	}
	if b.dir, err = os.MkdirTemp("", "outboxd-bench-"); err != nil {
		return nil, err
	}
	b.dbName = "outboxd_bench_" + b.id
	admin, err := pgx.Connect(ctx, b.adminURL)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL must run at %s (make services): %w", redact.DSN(b.adminURL), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+b.dbName); err != nil {
		return nil, fmt.Errorf("error creating database %s: %w", b.dbName, err)
	}
	if b.pgURL, err = withDatabase(b.adminURL, b.dbName); err != nil {
		return nil, err
	}
	if b.pg, err = pgxpool.New(ctx, b.pgURL); err != nil {
		return nil, err
	}
	return b, nil
}

// withDatabase returns the PostgreSQL URL u naming database db.
func withDatabase(u, db string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("error parsing the PostgreSQL URL: %w", err)
	}
	p.Path = "/" + db
	return p.String(), nil
}

// stream returns the name of the run's stream for purpose.
func (b *backends) stream(purpose string) string { return "bench_" + b.id + ":" + purpose }

// file returns the path of a file in the run's folder.
func (b *backends) file(name string) string { return filepath.Join(b.dir, name) }

// close drops the database, deletes the run's Redis keys and its folder.
func (b *backends) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if b.pg != nil {
		b.pg.Close()
		if admin, err := pgx.Connect(ctx, b.adminURL); err == nil {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+b.dbName+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(os.Stderr, "bench: error dropping database %s: %v\n", b.dbName, err)
			}
			_ = admin.Close(ctx)
		}
	}
	if b.cluster != nil {
		_ = b.rdb.Close()
		b.cluster.Kill() // its keys with it
		b.rdb = nil
	}
	if b.rdb != nil {
		iter := b.rdb.Scan(ctx, 0, "bench_"+b.id+":*", 100).Iterator()
		for iter.Next(ctx) {
			b.rdb.Del(ctx, iter.Val())
		}
		_ = b.rdb.Close()
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// truncateReadModel empties the read model's tables.
func (b *backends) truncateReadModel(ctx context.Context) error {
	_, err := b.pg.Exec(ctx, "TRUNCATE events, device_daily_stats")
	return err
}

// checkReadModel fails unless the read model's events table holds n rows.
func (b *backends) checkReadModel(ctx context.Context, what string, n int) error {
	var rows int64
	if err := b.pg.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&rows); err != nil {
		return fmt.Errorf("%s: error counting the read model's rows: %w", what, err)
	}
	if rows != int64(n) {
		return fmt.Errorf("%s: the read model holds %d rows, not %d", what, rows, n)
	}
	return nil
}

// checkExactlyOnce fails unless the read model holds each of the n events
// once: n rows, and daily counts that add up to n.
func (b *backends) checkExactlyOnce(ctx context.Context, what string, n int) error {
	if err := b.checkReadModel(ctx, what, n); err != nil {
		return err
	}
	var counted int64
	if err := b.pg.QueryRow(ctx, "SELECT coalesce(sum(event_count), 0) FROM device_daily_stats").Scan(&counted); err != nil {
		return fmt.Errorf("%s: error adding up the daily counts: %w", what, err)
	}
	if counted != int64(n) {
		return fmt.Errorf("%s: the daily counts add up to %d, not %d", what, counted, n)
	}
	return nil
}

// removeSQLite removes the SQLite file path with its WAL and shared memory
// (none of them there is no error).
func removeSQLite(path string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// freeAddr returns a loopback address with a port that is free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// copySQLite copies the SQLite file src (and its WAL, when there is one) to
// dst, replacing dst and its WAL and shared memory; no process may have
// either open.
func copySQLite(src, dst string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(dst + suffix); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	for _, suffix := range []string{"", "-wal"} {
		if err := copyFile(src+suffix, dst+suffix); err != nil {
			if suffix != "" && os.IsNotExist(err) {
				continue
			}
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("error copying %s: %w", src, err)
	}
	return out.Close()
}

// machine describes this machine in a line.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.1f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d × %s%s", runtime.NumCPU(), model, mem)
}

// redisArgs are the Redis flags of a role: --redis-url, and
// --redis-cluster on the run's own cluster.
func (b *backends) redisArgs() []string {
	if b.cluster != nil {
		return []string{"--redis-url", b.redisURL, "--redis-cluster"}
	}
	return []string{"--redis-url", b.redisURL}
}

// useCluster starts a local Redis Cluster of three masters (redisproc,
// redis-cli) in the run's folder and makes it the run's Redis in place of
// BENCH_REDIS_URL.
func (b *backends) useCluster(ctx context.Context) error {
	c := &redisproc.Cluster{}
	for i := range 3 {
		port, err := redisproc.SparePort()
		if err != nil {
			return err
		}
		dir := filepath.Join(b.dir, "redis-"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		c.Servers = append(c.Servers, &redisproc.Server{Port: port, Dir: dir})
	}
	if err := c.Start(30 * time.Second); err != nil {
		c.Kill()
		return fmt.Errorf("starting a local Redis Cluster: %w", err)
	}
	opt, err := redis.ParseClusterURL(c.Seeds())
	if err != nil {
		c.Kill()
		return err
	}
	rdb := redis.NewClusterClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		c.Kill()
		return err
	}
	_ = b.rdb.Close()
	b.rdb, b.redisURL, b.cluster = rdb, c.Seeds(), c
	return nil
}

// newRun is the start the harness's subcommands share: it checks the
// outboxd binary at bin, opens the run's backends (the caller closes
// b.be) with the read model's schema applied, and returns a bench of n
// events on them.
func newRun(ctx context.Context, out io.Writer, bin string, n int) (*bench, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no outboxd binary at %s (make build): %w", bin, err)
	}
	be, err := openBackends(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Postgres(ctx, be.pgURL); err != nil {
		be.close()
		return nil, err
	}
	return &bench{out: out, n: n, be: be, l: &launcher{bin: bin, dir: be.dir, profileDir: os.Getenv("BENCH_PROFILE")},
		res: &Results{}, timeout: 2*time.Minute + time.Duration(n/1000)*time.Second}, nil
}
