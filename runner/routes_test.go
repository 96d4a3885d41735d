package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// TestRoutes: `--route` sends three types to two streams (a and b to the
// default stream S1, c to S2). ingest records each outbox entry for its
// type's stream, dispatch runs one dispatcher per stream, a Go worker
// (a projector of the test's own) reads S1 in its group and the Python
// consumer reads S2 in another. While the Python consumer is stopped the
// Go worker goes on and S1 is trimmed, and S2 is trimmed only below what
// the Python group acknowledged (its lag shows in /v1/status); resumed, it
// gets every event of c once. A reconcile sweep with the same routes then
// re-publishes the unsynced c events (no Go group owns their syncedAt) to
// S2.
func TestRoutes(t *testing.T) {
	t.Parallel()
	python := python3(t)
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	s1, s2 := prefix+"-s1", prefix+"-s2"
	st, path := migratedSQLite(t, t.TempDir())
	common := []string{"--store", "sqlite:" + path, "--stream", s1, "--route", "a=" + s1, "--route", "b=" + s1, "--route", "c=" + s2}
	redisURL := []string{"--redis-url", testkit.RedisURL()}

	ingestAddr, dispatchAddr := freeAddr(t), freeAddr(t)
	startRole(t, ingestAddr, append([]string{"ingest"}, common...)...)
	startRole(t, dispatchAddr, slices.Concat([]string{"dispatch"}, common, redisURL, []string{"--stream-retention", "1ms"})...)

	// The Go group on S1: a projector of the test's own, a table of ids.
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, `CREATE TABLE routed (event_id text PRIMARY KEY, type text NOT NULL)`)
	require.NoError(t, err)
	w, err := worker.New(st, rdb, pg.Pool, &worker.Config{Stream: s1, Group: "go", Block: 50 * time.Millisecond,
		Projector: worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			for _, ev := range events {
				if _, err := tx.Exec(ctx, `INSERT INTO routed VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ID, ev.Type); err != nil {
					return err
				}
			}
			return nil
		})}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

	byType := map[string][]string{}
	seq := 0
	write := func(n int) {
		for range n {
			typ := []string{"a", "b", "c"}[seq%3]
			body := fmt.Sprintf(`{"sourceKey":"shop","deviceKey":"d-%d","type":%q,"occurredAt":"2026-11-04T10:%02d:00Z","payload":{"i":%d}}`,
				seq%5, typ, seq%60, seq)
			seq++
			resp, err := http.Post("http://"+ingestAddr+"/v1/events", "application/json", bytes.NewReader([]byte(body)))
			require.NoError(t, err)
			var res struct{ ID string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			byType[typ] = append(byType[typ], res.ID)
		}
	}
	xlen := func(key string) int64 {
		n, err := rdb.XLen(ctx, key).Result()
		require.NoError(t, err)
		return n
	}
	projected := func() []string {
		rows, err := pg.Pool.Query(ctx, `SELECT event_id FROM routed`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	consume := func(count int) []string {
		stdout := runPythonConsumer(t, python, "--stream", s2, "--group", "py", "--count", fmt.Sprint(count))
		var ids []string
		sc := bufio.NewScanner(bytes.NewReader(stdout))
		for sc.Scan() {
			var line struct{ EventID, Type string }
			require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
			require.Equal(t, "c", line.Type, "S2 holds the events of c only")
			ids = append(ids, line.EventID)
		}
		return ids
	}
	status := func() ostatus.Snapshot {
		resp, err := http.Get("http://" + dispatchAddr + "/v1/status")
		require.NoError(t, err)
		defer resp.Body.Close()
		var s ostatus.Snapshot
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
		return s
	}
	pyLag := func(s ostatus.Snapshot) *ostatus.GroupCounts {
		for _, r := range s.RoutedStreams {
			for _, g := range r.Groups {
				if r.Name == s2 && g.Name == "py" {
					return &g
				}
			}
		}
		return nil
	}

	// Phase 1: both groups read what is in.
	write(18)
	require.Eventually(t, func() bool { return xlen(s2) == 6 }, 30*time.Second, 20*time.Millisecond, "S2 receives the 6 events of c")
	got := consume(6)
	require.ElementsMatch(t, byType["c"], got)
	require.Eventually(t, func() bool { return xlen(s2) == 0 }, 30*time.Second, 20*time.Millisecond, "S2's dispatcher trims behind py")

	// Phase 2: the Python consumer is stopped, the Go worker goes on.
	write(18)
	require.Eventually(t, func() bool {
		return len(projected()) == 24 && xlen(s1) == 0
	}, 60*time.Second, 20*time.Millisecond, "the Go group projects a and b, and S1 is trimmed behind it")
	require.ElementsMatch(t, slices.Concat(byType["a"], byType["b"]), projected(), "every event of a and b, none of c")
	require.Eventually(t, func() bool { return xlen(s2) == 6 }, 30*time.Second, 20*time.Millisecond,
		"S2 is trimmed below what py acknowledged, and keeps the 6 it has not")
	require.Eventually(t, func() bool {
		g := pyLag(status())
		return g != nil && g.Lag != nil && *g.Lag == 6
	}, 10*time.Second, 20*time.Millisecond, "the lagging group's lag in /v1/status")
	for _, id := range byType["a"] {
		require.Equal(t, outbox.StateSynced, testkit.Event(t, st, id).State(), "the Go group owns syncedAt of S1's events")
	}

	// Resumed, it gets the rest: every event of c once.
	got = append(got, consume(6)...)
	require.ElementsMatch(t, byType["c"], got)
	require.Eventually(t, func() bool { return xlen(s2) == 0 }, 30*time.Second, 20*time.Millisecond, "S2 trimmed once acknowledged")
	entries, err := st.Undispatched(ctx, s2, store.Partition{}, "", 100)
	require.NoError(t, err)
	require.Empty(t, entries)

	// The events of c are unsynced (no group of S2 owns syncedAt): a sweep
	// with the same routes re-publishes them to S2, none to S1.
	var out bytes.Buffer
	code := run(ctx, slices.Concat([]string{"reconcile"}, common, redisURL, []string{"--min-age", "1ms", "--json", "--http-addr", ""}), &out, &out)
	require.Equal(t, ExitOK, code, out.String())
	var rep struct{ Published int }
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(bytes.Split(out.Bytes(), []byte("\n"))[0]), &rep), out.String())
	require.Equal(t, 12, rep.Published, out.String())
	require.ElementsMatch(t, byType["c"], consume(12), "re-published to S2")
}

// TestRouteFlag: --route is TYPE=STREAM, once per type, with a valid type
// and a stream name; a bad one is a usage error naming the flag. Roles
// that neither write nor publish have no --route.
func TestRouteFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{"--route", "a"}, {"--route", "a="}, {"--route", "a=s1", "--route", "a=s2"}, {"--route", "=s1"}, {"--route", "a= s1"}} {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"ingest", "--store", "sqlite:" + filepath.Join(t.TempDir(), "x.db")}, bad...), &out, &out)
		require.Equal(t, ExitUsage, code, out.String())
		require.Contains(t, out.String(), "route", bad)
	}
	for _, r := range []string{"ingest", "dispatch", "reconcile", "dev", "work"} {
		fs, _ := newFlagSet(mustRole(t, r))
		require.NotNil(t, fs.Lookup("route"), r)
	}
	for _, r := range []string{"migrate", "status"} {
		fs, _ := newFlagSet(mustRole(t, r))
		require.Nil(t, fs.Lookup("route"), r)
	}
}

func mustRole(t *testing.T, name string) *role {
	t.Helper()
	r, _, ok := lookupRole([]string{name})
	require.True(t, ok, name)
	return r
}

// TestDevRoutes: `outboxd dev --route` relays and projects every stream
// (its workers read the routed ones too): every event ends synced, the
// routed stream holds the events of its type only.
func TestDevRoutes(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{1, 2} {
		t.Run(fmt.Sprintf("Partitions%d", partitions), func(t *testing.T) {
			t.Parallel()
			_, prefix := testkit.NewRedis(t)
			other := prefix + "-other"
			b := startDev(t, "", "--route", "c="+other, "--min-age", "1h", "--partitions", strconv.Itoa(partitions))
			const n = 30
			for i := range n {
				body := fmt.Sprintf(`{"sourceKey":"s","deviceKey":"d-%d","type":%q,"occurredAt":"2026-11-04T10:%02d:00Z"}`, i%4, []string{"a", "b", "c"}[i%3], i)
				code, out := b.post(t, "/v1/events", "", body)
				require.Equal(t, http.StatusCreated, code, string(out))
			}
			require.Eventually(t, func() bool {
				s, err := b.status()
				return err == nil && converged(s, n)
			}, 60*time.Second, 50*time.Millisecond, "the pipeline did not converge: %s", b.stderr)
			// The routed type's entries are in the routed stream's
			// partitions (hash-tagged keys when there are several), and
			// only there.
			rdb, _ := testkit.NewRedis(t)
			keys := []string{other}
			if partitions > 1 {
				keys = nil
				for p := range partitions {
					keys = append(keys, fmt.Sprintf("{%s:%d}", other, p))
				}
				unpartitioned, err := rdb.Exists(context.Background(), other).Result()
				require.NoError(t, err)
				require.Zero(t, unpartitioned, "nothing in the unpartitioned key")
			}
			var msgs []redis.XMessage
			for _, key := range keys {
				m, err := rdb.XRange(context.Background(), key, "-", "+").Result()
				require.NoError(t, err)
				msgs = append(msgs, m...)
			}
			require.Len(t, msgs, n/3)
			for _, m := range msgs {
				msg, err := outbox.DecodeMessage(m.Values)
				require.NoError(t, err)
				require.Equal(t, "c", msg.Type)
			}
			// The status shows the lag of each of the routed stream's
			// partitions.
			s, err := b.status()
			require.NoError(t, err)
			var names []string
			for _, r := range s.RoutedStreams {
				names = append(names, r.Name)
			}
			require.ElementsMatch(t, keys, names)
		})
	}
}

// TestWorkRoutesReplays: a `work` instance given the writer's --route
// serves replays as ingest would: a replay of a window sends each original
// to the replay lane of its type's stream, so the originals of a routed
// type go to the routed stream (read by another deployment) and those of
// the others to this instance's --stream, whose worker projects them;
// --rebuild removes the rows of its projection file first.
func TestWorkRoutesReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	s1, s2 := prefix+"-s1", prefix+"-s2"
	routes := outbox.Routes{"c": s2}
	dir := t.TempDir()
	st, path := migratedSQLite(t, dir)
	var inputs []outbox.Input
	for i := range 6 {
		inputs = append(inputs, outbox.Input{SourceKey: "s", DeviceKey: fmt.Sprintf("d%d", i), Type: []string{"a", "c"}[i%2],
			OccurredAt: fmt.Sprintf("2026-11-03T10:%02d:00Z", i)})
	}
	_, err := outbox.NewWriter(st, &outbox.WriterConfig{Stream: s1, Routes: routes}).Write(ctx, inputs)
	require.NoError(t, err)

	pg := testkit.NewPostgres(t)
	_, err = pg.Pool.Exec(ctx, `CREATE TABLE projected (event_id text PRIMARY KEY, type text NOT NULL)`)
	require.NoError(t, err)
	file := filepath.Join(dir, "projected.sql")
	require.NoError(t, os.WriteFile(file, []byte("-- key: projected.event_id\nINSERT INTO projected VALUES (:eventId, :type) ON CONFLICT DO NOTHING"), 0o600))
	addr := freeAddr(t)
	startRole(t, addr, "work", "--store", "sqlite:"+path, "--redis-url", testkit.RedisURL(), "--postgres-url", pg.URL,
		"--stream", s1, "--route", "c="+s2, "--projection", file)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)

	code, out, errOut := cli("replay", "--server", "http://"+addr, "--from", "2026-11-03T00:00:00Z", "--to", "2026-11-04T00:00:00Z")
	require.Equal(t, ExitOK, code, out+errOut)
	lane := func(s string) []string {
		msgs, err := rdb.XRange(ctx, stream.NewKeys(s, "").Replay(), "-", "+").Result()
		require.NoError(t, err)
		var types []string
		for _, m := range msgs {
			msg, err := outbox.DecodeMessage(m.Values)
			require.NoError(t, err)
			types = append(types, msg.Type)
		}
		return types
	}
	require.Equal(t, []string{"c", "c", "c"}, lane(s2), "the routed type's replays on its stream's lane")
	require.Equal(t, []string{"a", "a", "a"}, lane(s1))
	require.Eventually(t, func() bool {
		var n int
		return pg.Pool.QueryRow(ctx, `SELECT count(*) FROM projected WHERE type = 'a'`).Scan(&n) == nil && n == 3
	}, 30*time.Second, 20*time.Millisecond, "the work instance projects its stream's replays")
	var routed int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM projected WHERE type = 'c'`).Scan(&routed))
	require.Zero(t, routed, "not its stream's")

	// --rebuild on the projection file: the rows it holds (the a's) are
	// removed through its key line, and the worker projects them again.
	code, out, errOut = cli("replay", "--server", "http://"+addr, "--from", "2026-11-03T00:00:00Z", "--to", "2026-11-04T00:00:00Z",
		"--rebuild", "--yes")
	require.Equal(t, ExitOK, code, out+errOut)
	require.Contains(t, out, "6 of the window's 6 originals re-published")
	require.Contains(t, out, ", 3 rows removed from the read model first")
	require.Equal(t, []string{"c", "c", "c", "c", "c", "c"}, lane(s2))
	require.Eventually(t, func() bool {
		var n int
		return pg.Pool.QueryRow(ctx, `SELECT count(*) FROM projected WHERE type = 'a'`).Scan(&n) == nil && n == 3
	}, 30*time.Second, 20*time.Millisecond, "projected again")
}
