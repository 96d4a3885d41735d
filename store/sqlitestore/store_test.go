package sqlitestore_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatesParentFolder", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a", "b", "outboxd.db")
		s, err := sqlitestore.Open(ctx, path, nil)
		require.NoError(t, err)
		defer s.Close(ctx)
		require.FileExists(t, path)
		require.Equal(t, "sqlite", s.Kind())
		require.NoError(t, s.Ping(ctx))
	})

	t.Run("NotSQLiteBSONFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		// A BSON document like lungo's store file: int32 size, elements, 0.
		doc := []byte{0, 0, 0, 0, 0x03}
		doc = append(doc, "collections\x00"...)
		doc = append(doc, 5, 0, 0, 0, 0) // empty embedded document
		doc = append(doc, 0)
		binary.LittleEndian.PutUint32(doc, uint32(len(doc)))
		require.NoError(t, os.WriteFile(path, doc, 0o600))

		s, err := sqlitestore.Open(ctx, path, nil)
		require.Error(t, err)
		require.Nil(t, s)
		require.Contains(t, err.Error(), "not an SQLite database")
		require.Contains(t, err.Error(), "BSON")
		require.Contains(t, err.Error(), "lungo")
		require.Contains(t, err.Error(), "move it away")
		require.Contains(t, err.Error(), "--store sqlite:PATH")
		got, readErr := os.ReadFile(path)
		require.NoError(t, readErr)
		require.Equal(t, doc, got, "the file is left as it was")
	})

	t.Run("NotSQLiteOtherFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		require.NoError(t, os.WriteFile(path, []byte("hello, this is a text file and not a database\n"), 0o600))
		_, err := sqlitestore.Open(ctx, path, nil)
		require.ErrorContains(t, err, "not an SQLite database")
		require.ErrorContains(t, err, "--store sqlite:PATH")
	})

	t.Run("SQLiteHeaderThenGarbage", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		b := []byte("SQLite format 3\x00")
		for range 200 {
			b = append(b, 0xab)
		}
		require.NoError(t, os.WriteFile(path, b, 0o600))
		_, err := sqlitestore.Open(ctx, path, nil)
		require.ErrorContains(t, err, "not an SQLite database (SQLite does not recognise it)")
		require.ErrorContains(t, err, "--store sqlite:PATH")
	})

	t.Run("Folder", func(t *testing.T) {
		t.Parallel()
		_, err := sqlitestore.Open(ctx, t.TempDir(), nil)
		require.ErrorContains(t, err, "folder")
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		_, err := sqlitestore.Open(ctx, path, &sqlitestore.Options{ReadConns: -1})
		require.ErrorContains(t, err, "Options.ReadConns")
		_, err = sqlitestore.Open(ctx, path, &sqlitestore.Options{BusyTimeout: -time.Second})
		require.ErrorContains(t, err, "Options.BusyTimeout")
		_, err = sqlitestore.Open(ctx, "", nil)
		require.ErrorContains(t, err, "empty path")
	})

	t.Run("OpenDoesNotMigrate", func(t *testing.T) {
		t.Parallel()
		s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), nil)
		require.NoError(t, err)
		defer s.Close(ctx)
		err = s.CheckSchema(ctx)
		require.ErrorIs(t, err, store.ErrSchema)
		require.ErrorContains(t, err, "events, outbox, feed_floor, leases")
		require.ErrorContains(t, err, "Store.Migrate")
		err = s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error { return nil })
		require.ErrorIs(t, err, store.ErrSchema, "writing before migrate says what to run")
		require.NoError(t, s.Migrate(ctx, nil))
		require.NoError(t, s.CheckSchema(ctx))
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConcurrentProcesses", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		// Four Stores stand in for four processes migrating at once.
		var stores []*sqlitestore.Store
		for range 4 {
			s, err := sqlitestore.Open(ctx, path, nil)
			require.NoError(t, err)
			defer s.Close(ctx)
			stores = append(stores, s)
		}
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() { errs[i] = s.Migrate(ctx, nil) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, s := range stores {
			require.NoError(t, s.CheckSchema(ctx))
		}
	})

	t.Run("NewerSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.DB().ExecContext(ctx, "PRAGMA user_version = 99")
		require.NoError(t, err)
		err = b.store.CheckSchema(ctx)
		require.ErrorIs(t, err, store.ErrSchema)
		require.ErrorContains(t, err, "newer")
		require.ErrorIs(t, b.store.Migrate(ctx, nil), store.ErrSchema)
	})

	t.Run("OlderSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.DB().ExecContext(ctx, "PRAGMA user_version = 0")
		require.NoError(t, err)
		err = b.store.CheckSchema(ctx)
		require.ErrorIs(t, err, store.ErrSchema)
		require.ErrorContains(t, err, "Store.Migrate")
	})
}

func TestWriteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RoundTripAtMilliseconds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Date(2026, 11, 1, 12, 0, 0, 123_456_789, time.FixedZone("X", 3600))
		events, entries := records(1, "s", at)
		synced := at.Add(time.Second)
		events[0].SyncedAt = &synced
		events[0].SyncFailure = &outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "c", Message: "m", At: at, Deliveries: 2}
		require.NoError(t, insert(ctx, b.store, events, entries))
		require.Len(t, entries[0].ID, 20, "the store assigned the entry id")

		got, err := b.store.LoadEvents(ctx, []string{events[0].ID})
		require.NoError(t, err)
		ev := got[events[0].ID].Event
		require.NoError(t, got[events[0].ID].Err)
		ms := at.Truncate(time.Millisecond)
		require.Equal(t, ms.UTC(), ev.CreatedAt)
		require.Equal(t, ms.Add(-time.Minute).UTC(), ev.OccurredAt)
		require.Equal(t, synced.Truncate(time.Millisecond).UTC(), *ev.SyncedAt)
		require.Equal(t, ms.UTC(), ev.SyncFailure.At)
		require.Equal(t, int64(2), ev.SyncFailure.Deliveries)
		require.JSONEq(t, `{"n":1}`, string(ev.Payload))
	})

	t.Run("DuplicateKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events, entries := records(2, "s", time.Now())
		require.NoError(t, insert(ctx, b.store, events[:1], entries[:1]))
		again, againEntries := records(2, "s", time.Now())
		again[1].IdempotencyKey = events[0].IdempotencyKey
		err := insert(ctx, b.store, again, againEntries)
		require.ErrorIs(t, err, outbox.ErrDuplicateKey)
		got, err := b.store.LoadEvents(ctx, []string{again[0].ID})
		require.NoError(t, err)
		require.Empty(t, got, "the transaction rolled back as a whole")
	})

	// A batch goes in multi-row INSERTs of 32, 16, 8, 4, 2 and 1 rows: a
	// stored key in any of them is a duplicate key, and every entry gets
	// the seq of its own row, also after the newest entries were deleted
	// (AUTOINCREMENT never hands out their seqs again).
	t.Run("MultiRowInserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		checkSeqs := func(entries []outbox.Entry) {
			t.Helper()
			for _, e := range entries {
				var eventID string
				seq, err := strconv.ParseInt(e.ID, 10, 64)
				require.NoError(t, err)
				require.NoError(t, b.store.DB().QueryRowContext(ctx, `SELECT event_id FROM outbox WHERE seq = ?`, seq).Scan(&eventID))
				require.Equal(t, e.EventID, eventID, "entry %s", e.ID)
			}
		}
		events, entries := records(100, "s", time.Now()) // 32 + 32 + 32 + 4
		require.NoError(t, insert(ctx, b.store, events, entries))
		checkSeqs(entries)
		more, moreEntries := records(63, "s", time.Now()) // 32 + 16 + 8 + 4 + 2 + 1
		require.NoError(t, insert(ctx, b.store, more, moreEntries))
		checkSeqs(moreEntries)
		require.Equal(t, "00000000000000000163", moreEntries[62].ID)
		_, err := b.store.DB().ExecContext(ctx, `DELETE FROM outbox WHERE seq > 150`)
		require.NoError(t, err)
		last, lastEntries := records(3, "s", time.Now())
		require.NoError(t, insert(ctx, b.store, last, lastEntries))
		checkSeqs(lastEntries)
		require.Equal(t, "00000000000000000164", lastEntries[0].ID)
		got, err := b.store.LoadEvents(ctx, []string{events[0].ID, events[50].ID, events[99].ID})
		require.NoError(t, err)
		require.Len(t, got, 3)

		for _, i := range []int{5, 99} { // in a 32-row INSERT, in the 4-row one
			again, againEntries := records(100, "s", time.Now())
			again[i].IdempotencyKey = events[i].IdempotencyKey
			err := insert(ctx, b.store, again, againEntries)
			require.ErrorIs(t, err, outbox.ErrDuplicateKey, "row %d", i)
			// The rows before the failing one stay until the rollback
			// (INSERT OR FAIL): the stored key is named, not theirs.
			require.ErrorContains(t, err, strconv.Quote(events[i].IdempotencyKey), "row %d", i)
			got, err := b.store.LoadEvents(ctx, []string{again[0].ID, again[98].ID})
			require.NoError(t, err)
			require.Empty(t, got, "the transaction rolled back as a whole")
		}
	})

	t.Run("DuplicateIDIsRunAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events, entries := records(1, "s", time.Now())
		require.NoError(t, insert(ctx, b.store, events, entries))
		// The third row of a 4-row INSERT: the two before it are in the
		// transaction when it fails, and their keys are not taken, so the
		// taken id is what failed it: ErrDuplicateKey, which the writer
		// answers by running the transaction again with new ids.
		again, _ := records(4, "s", time.Now())
		again[2].ID = events[0].ID
		err := insert(ctx, b.store, again, nil)
		require.ErrorIs(t, err, outbox.ErrDuplicateKey)
		require.ErrorContains(t, err, "an event id is taken")
		got, err := b.store.LoadEvents(ctx, []string{again[0].ID, again[1].ID, again[3].ID})
		require.NoError(t, err)
		require.Empty(t, got, "the transaction rolled back as a whole")
	})

	t.Run("LookupKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events, entries := records(3, "s", time.Now())
		require.NoError(t, insert(ctx, b.store, events, entries))
		err := b.store.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			got, err := tx.LookupKeys(ctx, []string{events[0].IdempotencyKey, "absent", events[2].IdempotencyKey})
			require.NoError(t, err)
			require.Equal(t, map[string]outbox.KeyRecord{
				events[0].IdempotencyKey: {ID: events[0].ID, ContentHash: events[0].ContentHash},
				events[2].IdempotencyKey: {ID: events[2].ID, ContentHash: events[2].ContentHash},
			}, got)
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("EntryIDsSortInSeqOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 12 { // past 9 and 10, where decimal strings would misorder
			write(t, b.store, "s", 1)
		}
		entries, err := b.store.Undispatched(ctx, "s", store.Partition{}, "", 100)
		require.NoError(t, err)
		require.Len(t, entries, 12)
		for i := 1; i < len(entries); i++ {
			require.Less(t, entries[i-1].ID, entries[i].ID)
		}
		require.Equal(t, "00000000000000000012", entries[11].ID)
	})

	t.Run("RunTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		db := b.store.DB()
		_, err := db.ExecContext(ctx, "CREATE TABLE app_rows (v TEXT)")
		require.NoError(t, err)
		w := outbox.NewWriter(b.store, &outbox.WriterConfig{Stream: "s"})
		in := []outbox.Input{{IdempotencyKey: "order-1", SourceKey: "src", DeviceKey: "d", OccurredAt: "2026-10-31T10:00:00Z"}}
		errAbort := errors.New("the caller aborts")
		inserts := 0
		run := func(fail bool) error {
			return b.store.RunTx(ctx, func(ctx context.Context, tx *sql.Tx, otx outbox.Tx) error {
				res, err := w.WriteInTx(ctx, otx, in)
				if err != nil || res[0].Duplicate {
					return err
				}
				inserts++
				if _, err := tx.ExecContext(ctx, "INSERT INTO app_rows (v) VALUES ('mine')"); err != nil {
					return err
				}
				if fail {
					return errAbort
				}
				return nil
			})
		}
		rows := func() (n int) {
			require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM app_rows").Scan(&n))
			return n
		}
		require.ErrorIs(t, run(true), errAbort, "the callback's error as it is")
		require.Zero(t, rows())
		testkit.RequireStored(t, b.store, 0)
		require.NoError(t, run(false))
		require.Equal(t, 1, rows())
		testkit.RequireStored(t, b.store, 1)
		entries, err := b.store.Undispatched(ctx, "s", store.Partition{}, "", 10)
		require.NoError(t, err)
		require.Len(t, entries, 1, "both committed")
		require.NoError(t, run(false), "the retry of a committed run")
		require.Equal(t, 1, rows(), "the event is a Duplicate: the caller's row is not inserted twice")
		require.Equal(t, 2, inserts)
	})

	t.Run("CallerTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		db := b.store.DB()
		_, err := db.ExecContext(ctx, "CREATE TABLE app_rows (v TEXT)")
		require.NoError(t, err)
		w := outbox.NewWriter(b.store, &outbox.WriterConfig{Stream: "s"})
		in := []outbox.Input{{SourceKey: "src", DeviceKey: "d", OccurredAt: "2026-10-31T10:00:00Z"}}

		run := func(commit bool) {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, "INSERT INTO app_rows (v) VALUES ('mine')")
			require.NoError(t, err)
			_, err = w.WriteInTx(ctx, b.store.Tx(tx), in)
			require.NoError(t, err)
			if commit {
				require.NoError(t, tx.Commit())
			} else {
				require.NoError(t, tx.Rollback())
			}
		}
		run(false)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM app_rows").Scan(&n))
		require.Zero(t, n)
		entries, err := b.store.Undispatched(ctx, "s", store.Partition{}, "", 10)
		require.NoError(t, err)
		require.Empty(t, entries, "both rolled back")

		run(true)
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM app_rows").Scan(&n))
		require.Equal(t, 1, n)
		entries, err = b.store.Undispatched(ctx, "s", store.Partition{}, "", 10)
		require.NoError(t, err)
		require.Len(t, entries, 1, "both committed")

		// The prepared statements exist now; a caller transaction reuses them.
		run(true)
		entries, err = b.store.Undispatched(ctx, "s", store.Partition{}, "", 10)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the same input is a duplicate")
	})
}

// TestTwoStoresShareFile stands in for two processes on one file: entries
// written through one are delivered by a feed of the other, and concurrent
// writers of both never see "database is locked".
func TestTwoStoresShareFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	a := open(t, path, nil)
	b := open(t, path, nil)

	f, err := b.OpenFeed(ctx, "s", nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(ctx)

	const writers, perWriter, batch = 8, 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers*perWriter)
	for _, s := range []*sqlitestore.Store{a, b} {
		for range writers {
			wg.Go(func() {
				for range perWriter {
					events, entries := records(batch, "s", time.Now())
					errs <- insert(ctx, s, events, entries)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err) // never "database is locked"
	}

	want := 2 * writers * perWriter * batch
	got := drain(t, f, want, 20*time.Second)
	require.Len(t, got, want)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].ID, got[i].ID, "in seq order")
	}
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(want), c.Total)
	require.Equal(t, int64(want), c.Pending)
}

// TestCommitWakesFeed: a feed waiting in Next returns well before its poll
// interval when a commit of the same Store inserts entries.
func TestCommitWakesFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	f, err := b.store.OpenFeed(ctx, "s", nil, store.FeedOptions{PollInterval: 10 * time.Second})
	require.NoError(t, err)
	defer f.Close(ctx)

	type result struct {
		entries []outbox.Entry
		err     error
	}
	done := make(chan result, 1)
	started := time.Now()
	go func() {
		entries, err := f.Next(ctx, 10, 30*time.Second)
		done <- result{entries, err}
	}()
	ids := write(t, b.store, "s", 2)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, ids, eventIDs(r.entries))
		require.Less(t, time.Since(started), 2*time.Second)
	case <-time.After(2 * time.Second):
		t.Fatal("the commit did not wake the feed")
	}
}

// TestFeedGathersCommitsAfterAWake: with FeedOptions.Gather, a feed woken
// by a commit while it waited reads Gather later, with the commits that
// followed, in one Next.
func TestFeedGathersCommitsAfterAWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	f, err := b.store.OpenFeed(ctx, "s", nil, store.FeedOptions{PollInterval: 10 * time.Second, Gather: time.Second})
	require.NoError(t, err)
	defer f.Close(ctx)
	waiting := make(chan struct{}, 1)
	sqlitestore.OnFeedWait(f, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	type result struct {
		entries []outbox.Entry
		err     error
	}
	done := make(chan result, 1)
	go func() {
		entries, err := f.Next(ctx, 10, 30*time.Second)
		done <- result{entries, err}
	}()
	<-waiting
	first := write(t, b.store, "s", 1)
	woke := time.Now()
	second := write(t, b.store, "s", 2)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, append(first, second...), eventIDs(r.entries), "both commits in one batch")
	require.GreaterOrEqual(t, time.Since(woke), 900*time.Millisecond, "read after the gather, not at the wake")
}

func TestFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := store.FeedOptions{PollInterval: 10 * time.Millisecond}

	t.Run("PositionAndResume", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := write(t, b.store, "s", 2)
		f, err := b.store.OpenFeed(ctx, "s", nil, opts)
		require.NoError(t, err)
		defer f.Close(ctx)
		require.Equal(t, store.Position("2"), f.Position(), "from now: after the last entry")
		ids := write(t, b.store, "s", 5)
		got, err := f.Next(ctx, 3, time.Second)
		require.NoError(t, err)
		require.Equal(t, ids[:3], eventIDs(got), "at most max, the entries before the feed opened are not delivered (%v)", before)
		require.Equal(t, store.Position("5"), f.Position())

		f2, err := b.store.OpenFeed(ctx, "s", store.Position("5"), opts)
		require.NoError(t, err)
		defer f2.Close(ctx)
		require.Equal(t, ids[3:], eventIDs(drain(t, f2, 2, 5*time.Second)))

		none, err := f2.Next(ctx, 10, 0)
		require.NoError(t, err)
		require.Empty(t, none, "wait 0 looks once")
	})

	t.Run("PositionLostBelowFloor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f, err := b.store.OpenFeed(ctx, "s", nil, opts)
		require.NoError(t, err)
		first := write(t, b.store, "s", 3)
		require.Equal(t, first, eventIDs(drain(t, f, 3, 5*time.Second)))
		require.NoError(t, f.Close(ctx))
		saved := store.Position("1") // after the first entry only
		later := write(t, b.store, "s", 2)

		l, err := b.store.AcquireLease(ctx, "s", "me", time.Now(), time.Minute)
		require.NoError(t, err)
		entries, err := b.store.Undispatched(ctx, "s", store.Partition{}, "", 10)
		require.NoError(t, err)
		require.NoError(t, b.store.MarkDispatched(ctx, l, []string{entries[0].ID, entries[1].ID, entries[2].ID}, time.Now().Add(-2*time.Hour)))
		open, err := b.store.OpenFeed(ctx, "s", saved, opts) // opened before the delete
		require.NoError(t, err)
		defer open.Close(ctx)
		n, err := b.store.DeleteDispatched(ctx, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, int64(3), n)

		_, err = b.store.OpenFeed(ctx, "s", saved, opts)
		require.ErrorIs(t, err, store.ErrPositionLost)
		_, err = open.Next(ctx, 10, 0)
		require.ErrorIs(t, err, store.ErrPositionLost, "an open feed notices too")

		f3, err := b.store.OpenFeed(ctx, "s", store.Position("3"), opts)
		require.NoError(t, err, "the floor itself is not lost")
		defer f3.Close(ctx)
		require.Equal(t, later, eventIDs(drain(t, f3, 2, 5*time.Second)))

		other, err := b.store.OpenFeed(ctx, "other", saved, opts)
		require.NoError(t, err, "floors are per stream")
		require.NoError(t, other.Close(ctx))

		fromNow, err := b.store.OpenFeed(ctx, "s", nil, opts)
		require.NoError(t, err)
		defer fromNow.Close(ctx)
		require.Equal(t, store.Position("5"), fromNow.Position())
	})

	t.Run("InvalidPosition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		write(t, b.store, "s", 2)
		for _, p := range []string{"abc", "-1", "82a1b2", "3"} { // "3": ahead of the last seq
			_, err := b.store.OpenFeed(ctx, "s", store.Position(p), opts)
			require.ErrorIs(t, err, store.ErrPositionLost, p)
		}
	})

	t.Run("ContextAndClose", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f, err := b.store.OpenFeed(ctx, "s", nil, store.FeedOptions{PollInterval: time.Hour})
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = f.Next(cctx, 10, time.Hour)
		require.ErrorIs(t, err, context.Canceled)

		done := make(chan error, 1)
		go func() {
			_, err := f.Next(ctx, 10, time.Hour)
			done <- err
		}()
		require.NoError(t, f.Close(ctx))
		select {
		case err := <-done:
			require.ErrorContains(t, err, "closed")
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not end a waiting Next")
		}
	})
}

func TestLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

	a, err := b.store.AcquireLease(ctx, "s", "a", now, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Name: "s", Owner: "a", Term: 1, Expires: now.Add(time.Minute)}, a)
	refused, err := b.store.AcquireLease(ctx, "s", "b", now.Add(time.Second), time.Minute)
	require.NoError(t, err)
	require.False(t, refused.Held())
	require.Equal(t, "a", refused.Owner, "a refusal names the holder")

	// Expired exactly at expires_at.
	bl, err := b.store.AcquireLease(ctx, "s", "b", now.Add(time.Minute), time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(2), bl.Term)

	require.NoError(t, b.store.SaveCheckpoint(ctx, bl, store.Checkpoint{Position: store.Position("42"), At: now}))
	ok, err := b.store.ReleaseLease(ctx, bl)
	require.NoError(t, err)
	require.True(t, ok)
	st, err := b.store.ReadLease(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "", st.Owner)
	require.Equal(t, int64(2), st.Term, "a release keeps the term")
	require.Equal(t, store.Position("42"), st.Position, "and the checkpoint")

	c, err := b.store.AcquireLease(ctx, "s", "c", now.Add(time.Minute), time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(3), c.Term)
	require.ErrorIs(t, b.store.MarkDispatched(ctx, bl, nil, now), store.ErrFenced)
	require.ErrorIs(t, b.store.MarkDispatched(ctx, store.Lease{Name: "never", Owner: "c", Term: 1}, nil, now), store.ErrFenced)

	_, err = b.store.DB().ExecContext(ctx, "UPDATE leases SET position = 'not-a-seq' WHERE name = 's'")
	require.NoError(t, err)
	st, err = b.store.ReadLease(ctx, "s")
	require.NoError(t, err)
	require.True(t, st.PositionInvalid)
}

func TestReconcilerOps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 4 {
		events, entries := records(1, "s", t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, insert(ctx, b.store, events, entries))
		ids = append(ids, events[0].ID)
	}
	now := t0.Add(time.Hour)
	got, err := b.store.Candidates(ctx, store.CandidateQuery{CreatedBefore: now, ClaimedBefore: now, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, ids, got)

	claimed, err := b.store.Claim(ctx, ids[:1], now, now.Add(-30*time.Minute))
	require.NoError(t, err)
	require.Len(t, claimed.Events, 1)
	require.Empty(t, claimed.Events[0].Payload, "the claim returns no payload")
	require.Equal(t, ids[0], claimed.Events[0].ID)

	c, err := b.store.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Total)
	require.Equal(t, int64(4), c.Pending)
	require.Equal(t, int64(4), c.Undispatched)
	require.Equal(t, t0, *c.OldestPending)
	require.False(t, c.Estimated)
	require.Empty(t, c.FailedByCategory)
}

// TestCorruptRow: an original the store cannot decode is reported, with
// its id, as corrupt; the others load.
func TestCorruptRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := write(t, b.store, "s", 2)
	_, err := b.store.DB().ExecContext(ctx, "UPDATE events SET sync_failure = '{not json', failure_category = 'poison' WHERE id = ?", ids[0])
	require.NoError(t, err)
	got, err := b.store.LoadEvents(ctx, ids)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.ErrorIs(t, got[ids[0]].Err, store.ErrCorrupt)
	require.NoError(t, got[ids[1]].Err)

	_, err = b.store.DB().ExecContext(ctx, "UPDATE events SET occurred_at = 'yesterday' WHERE id = ?", ids[1])
	require.NoError(t, err)
	got, err = b.store.LoadEvents(ctx, ids[1:])
	require.NoError(t, err)
	require.ErrorIs(t, got[ids[1]].Err, store.ErrCorrupt)

	events, err := b.store.LoadEvents(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, events)
	var key string
	require.NoError(t, b.store.DB().QueryRowContext(ctx, "SELECT idempotency_key FROM events WHERE id = ?", ids[1]).Scan(&key))
	_, err = b.store.EventByKey(ctx, key)
	require.ErrorIs(t, err, store.ErrCorrupt)
}

// TestUnavailable: a lock not granted in time and a closed store are
// ErrUnavailable; a cancelled context stays a context error.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	holder := open(t, path, nil)
	waiter := open(t, path, &sqlitestore.Options{BusyTimeout: 50 * time.Millisecond})
	slow := open(t, path, &sqlitestore.Options{BusyTimeout: time.Hour})

	// Another "process" holds the write lock.
	tx, err := holder.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "UPDATE leases SET term = term WHERE name = 'x'")
	require.NoError(t, err)

	_, err = waiter.MarkSynced(ctx, []string{"x"}, time.Now())
	require.True(t, store.IsUnavailable(err), "busy after the timeout: %v", err)

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = slow.WriteTx(cctx, func(ctx context.Context, tx outbox.Tx) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, store.IsUnavailable(err))
	require.NoError(t, tx.Rollback())

	require.NoError(t, waiter.Close(ctx))
	require.NoError(t, waiter.Close(ctx), "Close is idempotent")
	_, err = waiter.Counts(ctx)
	require.True(t, store.IsUnavailable(err), "closed: %v", err)
	_, err = waiter.LoadEvents(ctx, []string{"x"})
	require.True(t, store.IsUnavailable(err), "closed: %v", err)
}

// TestWriterThroughStore runs outbox.Writer on the store: idempotency and
// concurrent writers of one key.
func TestWriterThroughStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outboxd.db")
	a := open(t, path, nil)
	b := open(t, path, nil)
	in := []outbox.Input{{SourceKey: "src", DeviceKey: "d", OccurredAt: "2026-10-31T10:00:00Z", Payload: json.RawMessage(`{"a":1}`)}}
	var wg sync.WaitGroup
	results := make([][]outbox.Result, 16)
	errs := make([]error, 16)
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() { results[i], errs[i] = outbox.NewWriter(s, nil).Write(ctx, in) })
	}
	wg.Wait()
	created := 0
	for i := range 16 {
		require.NoError(t, errs[i])
		require.Equal(t, results[0][0].ID, results[i][0].ID)
		if !results[i][0].Duplicate {
			created++
		}
	}
	require.Equal(t, 1, created)
}

// TestCheckpointInBackground: commits leave the WAL to the background
// checkpoint (no commit copies pages into the file, however large the WAL),
// and the checkpoint copies them within its interval.
func TestCheckpointInBackground(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	size := func(path string) int64 {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Size()
	}
	write := func(s *sqlitestore.Store) {
		for range 3 { // about 6 MB of WAL: past SQLite's automatic checkpoint of 1,000 pages
			events, entries := records(3000, "s", time.Now())
			require.NoError(t, insert(ctx, s, events, entries))
		}
	}

	t.Run("NotInTheCommit", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		s := open(t, path, &sqlitestore.Options{CheckpointInterval: time.Hour})
		before := size(path)
		write(s)
		require.Equal(t, before, size(path), "no commit checkpointed")
		require.Greater(t, size(path+"-wal"), int64(4<<20))
	})

	t.Run("InTheBackground", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		s := open(t, path, &sqlitestore.Options{CheckpointInterval: 5 * time.Millisecond})
		before := size(path)
		write(s)
		require.Eventually(t, func() bool { return size(path) > before+(2<<20) }, 10*time.Second, 5*time.Millisecond,
			"the checkpoint copied the WAL into the file")
	})

	// Under writes without pause (two writers, so one is always queued) a
	// checkpoint beside them never copies everything, and without the
	// checkpoint on the write connection the WAL would grow to all that
	// was written (30 MB here); with it the WAL restarts once it holds 256
	// frames (1 MB) and the file stays near 8 MB: one transaction of each
	// writer and what a checkpoint beside them leaves.
	t.Run("RestartsUnderSteadyWrites", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		s := open(t, path, sqlitestore.WithWALRestartFrames(&sqlitestore.Options{CheckpointInterval: 2 * time.Millisecond}, 256))
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := range 10 {
					events, entries := records(1000, "s"+strconv.Itoa(w)+"-"+strconv.Itoa(i), time.Now())
					if err := insert(ctx, s, events, entries); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		require.NoError(t, <-errs)
		require.Less(t, size(path+"-wal"), int64(16<<20), "the WAL restarted while the writes went on")
	})
}

// TestDependencies: a program that wants only the SQLite store links
// neither goose nor pgx (its schema is embedded here, not in package
// migrations) nor the drivers of MongoDB or Redis.
func TestDependencies(t *testing.T) {
	t.Parallel()
	testkit.RequireNoDeps(t, "github.com/outboxd/outboxd/store/sqlitestore",
		"github.com/pressly/goose", "github.com/jackc/pgx", "github.com/outboxd/outboxd/migrations",
		"go.mongodb.org/mongo-driver", "github.com/redis/go-redis")
}

// TestObserveWriter checks that Options.ObserveWriter sees each write
// transaction with the role of its context: ingest for WriteTx without
// one, "other" for another write without one.
func TestObserveWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var roles []string
	s := open(t, filepath.Join(t.TempDir(), "outboxd.db"), &sqlitestore.Options{ObserveWriter: func(role string, waited, held time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, waited, time.Duration(0))
		require.Positive(t, held)
		roles = append(roles, role)
	}})
	mu.Lock()
	roles = nil // the migration's
	mu.Unlock()
	ids := write(t, s, "s", 2)
	_, err := s.MarkSynced(store.WithRole(ctx, store.RoleWorker), ids[:1], time.Now())
	require.NoError(t, err)
	_, err = s.MarkSynced(ctx, ids[1:], time.Now())
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{store.RoleIngest, store.RoleWorker, "other"}, roles)
}

// TestTableNames: Options.EventsTable and Options.OutboxTable are checked
// before anything is opened or created; a table of those names that
// outboxd did not create fails Migrate with store.ErrForeign naming the
// option, and changes nothing in the file.
func TestTableNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			opts sqlitestore.Options
			want []string
		}{
			{sqlitestore.Options{EventsTable: "svc-events"}, []string{"Options.EventsTable", "not an SQL identifier"}},
			{sqlitestore.Options{OutboxTable: "1outbox"}, []string{"Options.OutboxTable", "not an SQL identifier"}},
			{sqlitestore.Options{EventsTable: `a"b`}, []string{"Options.EventsTable", "not an SQL identifier"}},
			{sqlitestore.Options{OutboxTable: "SQLite_x"}, []string{"Options.OutboxTable", "sqlite_"}},
			{sqlitestore.Options{EventsTable: "leases"}, []string{"Options.EventsTable", "its own leases table"}},
			{sqlitestore.Options{OutboxTable: "Events_Removed"}, []string{"Options.OutboxTable", "its own events_removed table"}},
			{sqlitestore.Options{EventsTable: "x", OutboxTable: "X"}, []string{"Options.OutboxTable", "the same table as Options.EventsTable"}},
			{sqlitestore.Options{EventsTable: "OUTBOX"}, []string{"Options.OutboxTable", "the same table as Options.EventsTable"}},
			{sqlitestore.Options{EventsTable: "x", OutboxTable: "x_id"}, []string{"Options.OutboxTable", "the index x_id of Options.EventsTable"}},
			{sqlitestore.Options{EventsTable: "x_undispatched", OutboxTable: "x"}, []string{"Options.OutboxTable", "its index x_undispatched would take the name of Options.EventsTable"}},
		} {
			require.Error(t, c.opts.Validate(), "%+v", c.opts)
			path := filepath.Join(t.TempDir(), "data", "outboxd.db")
			_, err := sqlitestore.Open(ctx, path, &c.opts)
			for _, w := range c.want {
				require.ErrorContains(t, err, w, "%+v", c.opts)
			}
			require.NoDirExists(t, filepath.Dir(path), "nothing created")
		}
		require.NoError(t, (&sqlitestore.Options{EventsTable: "Order", OutboxTable: "outboxd_outbox"}).Validate(), "a keyword: the store quotes names")
		require.NoError(t, (*sqlitestore.Options)(nil).Validate())
	})

	t.Run("KeywordAndCase", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		s := open(t, path, &sqlitestore.Options{EventsTable: "Order", OutboxTable: "Select"})
		write(t, s, "s", 3)
		f, err := s.OpenFeed(ctx, "s", store.Position("0"), store.FeedOptions{})
		require.NoError(t, err)
		require.Len(t, drain(t, f, 3, 5*time.Second), 3)
		// Another process naming them in other case finds the same tables.
		again := open(t, path, &sqlitestore.Options{EventsTable: "ORDER", OutboxTable: "select"})
		require.NoError(t, again.CheckSchema(ctx))
		c, err := again.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), c.Total)
		require.Equal(t, int64(3), c.Undispatched)
		require.ElementsMatch(t, []string{"order", "select"}, tablesLike(t, s.DB(), "order", "select"))
	})

	t.Run("ForeignTable", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct{ table, field string }{{"events", "Options.EventsTable"}, {"outbox", "Options.OutboxTable"}} {
			path := filepath.Join(t.TempDir(), "outboxd.db")
			s, err := sqlitestore.Open(ctx, path, nil)
			require.NoError(t, err)
			defer s.Close(ctx)
			_, err = s.DB().ExecContext(ctx, `CREATE TABLE `+c.table+` (id INTEGER PRIMARY KEY, sku TEXT); INSERT INTO `+c.table+` (sku) VALUES ('a')`)
			require.NoError(t, err)
			err = s.Migrate(ctx, nil)
			require.ErrorIs(t, err, store.ErrForeign)
			require.ErrorContains(t, err, "table "+c.table+" exists and outboxd did not create it")
			require.ErrorContains(t, err, c.field)
			require.Equal(t, 0, userVersion(t, s.DB()), "nothing migrated")
			require.Empty(t, tablesLike(t, s.DB(), "feed_floor", "leases", "outboxd_events", "outboxd_outbox"))
			require.ErrorIs(t, s.CheckSchema(ctx), store.ErrSchema)

			other := open(t, path, &sqlitestore.Options{EventsTable: "outboxd_events", OutboxTable: "outboxd_outbox"})
			require.NoError(t, other.CheckSchema(ctx))
			write(t, other, "s", 2)
			var sku string
			require.NoError(t, other.DB().QueryRowContext(ctx, `SELECT group_concat(sku) FROM `+c.table).Scan(&sku))
			require.Equal(t, "a", sku, "the service's table is left as it was")
		}
	})

	t.Run("ForeignColumns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT)`)
		require.NoError(t, err)
		s, err := sqlitestore.Open(ctx, b.path, &sqlitestore.Options{EventsTable: "orders"})
		require.NoError(t, err)
		defer s.Close(ctx)
		for _, err := range []error{s.Migrate(ctx, nil), s.CheckSchema(ctx)} {
			require.ErrorIs(t, err, store.ErrForeign)
			require.ErrorContains(t, err, "orders lacks outboxd's columns idempotency_key, source_key")
			require.ErrorContains(t, err, "Options.EventsTable")
		}
	})

	t.Run("RenamedAfterMigrate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s, err := sqlitestore.Open(ctx, b.path, &sqlitestore.Options{OutboxTable: "outboxd_outbox"})
		require.NoError(t, err)
		defer s.Close(ctx)
		err = s.CheckSchema(ctx)
		require.ErrorIs(t, err, store.ErrSchema)
		require.ErrorContains(t, err, "outboxd_outbox missing")
		err = s.Migrate(ctx, nil)
		require.ErrorIs(t, err, store.ErrForeign)
		require.ErrorContains(t, err, "no table outboxd_outbox")
		require.ErrorContains(t, err, "Options.OutboxTable")
		require.Empty(t, tablesLike(t, s.DB(), "outboxd_outbox"))
	})

	t.Run("ServiceUserVersion", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outboxd.db")
		s, err := sqlitestore.Open(ctx, path, nil)
		require.NoError(t, err)
		defer s.Close(ctx)
		_, err = s.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY); PRAGMA user_version = 3`)
		require.NoError(t, err)
		err = s.Migrate(ctx, nil)
		require.ErrorIs(t, err, store.ErrForeign)
		require.ErrorContains(t, err, "PRAGMA user_version is 3")
		require.ErrorContains(t, err, "another program versions this file")
		require.Equal(t, 3, userVersion(t, s.DB()))
		require.Empty(t, tablesLike(t, s.DB(), "events", "outbox", "leases"))
	})
}

// userVersion returns the file's PRAGMA user_version.
func userVersion(t testing.TB, db *sql.DB) int {
	t.Helper()
	var v int
	require.NoError(t, db.QueryRow(`PRAGMA user_version`).Scan(&v))
	return v
}

// tablesLike returns those of names that are tables of db, in lower case.
func tablesLike(t testing.TB, db *sql.DB, names ...string) []string {
	t.Helper()
	list, err := json.Marshal(names)
	require.NoError(t, err)
	rows, err := db.Query(`SELECT lower(name) FROM sqlite_master WHERE type = 'table' AND lower(name) IN (SELECT value FROM json_each(?))`, string(list))
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, errors.Join(rows.Err(), rows.Close()))
	return out
}
