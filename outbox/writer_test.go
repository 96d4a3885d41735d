package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

type writerBundle struct {
	st     store.Store
	writer *outbox.Writer
	faults *fault.Set
}

func setupWriter(t *testing.T) *writerBundle {
	t.Helper()
	st := testkit.NewStore(t)
	f := &fault.Set{}
	cfg := &outbox.WriterConfig{}
	outbox.SetFaults(cfg, f)
	return &writerBundle{st: st, faults: f, writer: outbox.NewWriter(st, cfg)}
}

func (b *writerBundle) requireStored(t *testing.T, n int64) {
	t.Helper()
	testkit.RequireStored(t, b.st, n)
}

func (b *writerBundle) event(t *testing.T, id string) *outbox.Event {
	t.Helper()
	return testkit.Event(t, b.st, id)
}

func input(device string) outbox.Input {
	return outbox.Input{SourceKey: "src", DeviceKey: device, OccurredAt: "2026-11-01T10:00:00.123Z", Payload: json.RawMessage(`{"t":21.5,"n":3}`)}
}

func TestWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WritesOriginalAndOutboxEntry", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
		ev := b.event(t, res[0].ID)
		require.Equal(t, outbox.StatePending, ev.State())
		require.JSONEq(t, `{"n":3,"t":21.5}`, string(ev.Payload))
		require.Equal(t, time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC), ev.OccurredAt.UTC())
		entries, err := b.st.Undispatched(ctx, outbox.StreamDefault, store.Partition{}, "", 10)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.Equal(t, ev.ID, entries[0].EventID)
		msg, err := outbox.DecodeMessage(map[string]any{outbox.PayloadField: entries[0].Message})
		require.NoError(t, err)
		require.Equal(t, ev.ID, msg.EventID)
		require.Equal(t, outbox.OriginOutbox, msg.Origin)
	})

	t.Run("FailureBetweenInsertsLeavesNeither", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		b.faults.Arm(outbox.FaultBetweenInserts, -1)
		_, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2")})
		require.ErrorIs(t, err, fault.ErrInjected)
		b.requireStored(t, 0)
		b.faults.Disarm(outbox.FaultBetweenInserts)
		_, err = b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		b.requireStored(t, 1)
	})

	t.Run("BatchIsAllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		bad := input("d3")
		bad.OccurredAt = "yesterday"
		_, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2"), bad})
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, []outbox.FieldError{{Index: 2, Field: "occurredAt", Reason: ve.Fields[0].Reason}}, ve.Fields,
			"the input's index and the field inside it; no HTTP path")
		require.Contains(t, ve.Error(), "input 2: occurredAt must be an RFC 3339 date-time")
		b.requireStored(t, 0)

		// A mismatch on one item rejects the whole batch too.
		k := input("d9")
		k.IdempotencyKey = "k"
		_, err = b.writer.Write(ctx, []outbox.Input{k})
		require.NoError(t, err)
		k.Payload = json.RawMessage(`{"other":true}`)
		_, err = b.writer.Write(ctx, []outbox.Input{input("d1"), k})
		require.ErrorIs(t, err, outbox.ErrIdempotencyMismatch)
		b.requireStored(t, 1)
	})

	t.Run("DuplicateWithinBatch", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d1")})
		require.NoError(t, err)
		require.Equal(t, res[0].ID, res[1].ID)
		require.False(t, res[0].Duplicate)
		require.True(t, res[1].Duplicate)
		b.requireStored(t, 1)
	})

	t.Run("MismatchWithinBatchNamesTheItem", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		a, c := input("d1"), input("d1")
		a.IdempotencyKey, c.IdempotencyKey = "same", "same"
		c.Payload = json.RawMessage(`{"t":1}`)
		_, err := b.writer.Write(ctx, []outbox.Input{input("x"), a, c})
		var mm *outbox.MismatchError
		require.ErrorAs(t, err, &mm)
		require.Equal(t, 2, mm.Index)
		require.Equal(t, 1, mm.OtherIndex)
		require.Empty(t, mm.ExistingID, "no id of the rolled-back transaction is named")
		b.requireStored(t, 0)
	})

	t.Run("DerivedKeyPrefixIsReserved", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		victim := input("d1")
		stolen := input("other")
		stolen.IdempotencyKey = outbox.DeriveKey("src", "d1", time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC))
		_, err := b.writer.Write(ctx, []outbox.Input{stolen})
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "idempotencyKey", ve.Fields[0].Field)
		res, err := b.writer.Write(ctx, []outbox.Input{victim})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
	})

	// An original stored by 0.1.0 under the hashed form of its derived
	// key is found by a retry: the same content is a Duplicate of it
	// (with the key it is stored under), other content a MismatchError;
	// for a named client's namespace too; on SQLite (which probes for keys
	// of the old form first, outbox.KeyRanger) and on MongoDB.
	t.Run("HashedDerivedKeyOfEarlierVersionIsFound", func(t *testing.T) {
		t.Parallel()
		for name, open := range map[string]func(t *testing.T) store.Store{
			"SQLite":  func(t *testing.T) store.Store { return testkit.NewSQLite(t) },
			"MongoDB": func(t *testing.T) store.Store { return testkit.NewMongo(t, nil) },
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				st := open(t)
				w := outbox.NewWriter(st, nil)
				occurred := time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC)
				in, named := input("d1"), input("d2")
				named.Client = "acme"
				events, entries, err := w.Records([]outbox.Input{in, named})
				require.NoError(t, err)
				require.Equal(t, outbox.DeriveKey("src", "d1", occurred), events[0].IdempotencyKey)
				hashed := outbox.HashedDerivedKey("src", "d1", occurred)
				events[0].IdempotencyKey = hashed
				events[1].IdempotencyKey = outbox.ClientKey("acme", outbox.HashedDerivedKey("src", "d2", occurred))
				insertRecords(t, st, events, entries)

				res, err := w.Write(ctx, []outbox.Input{in, named})
				require.NoError(t, err)
				require.Equal(t, []outbox.Result{
					{ID: events[0].ID, IdempotencyKey: hashed, Duplicate: true},
					{ID: events[1].ID, IdempotencyKey: outbox.HashedDerivedKey("src", "d2", occurred), Duplicate: true},
				}, res)
				testkit.RequireStored(t, st, 2)

				other := input("d1")
				other.Payload = json.RawMessage(`{"t":1}`)
				_, err = w.Write(ctx, []outbox.Input{other})
				var mm *outbox.MismatchError
				require.ErrorAs(t, err, &mm)
				require.Equal(t, events[0].ID, mm.ExistingID)
				require.Equal(t, hashed, mm.Key)
				testkit.RequireStored(t, st, 2)
			})
		}
	})

	// On a store that can probe a range of keys (SQLite), the 0.1.0 form
	// of a keyless event's key is looked up only in a namespace that holds
	// keys of that form.
	t.Run("HashedFormLookedUpOnlyWhereStored", func(t *testing.T) {
		t.Parallel()
		st := testkit.NewSQLite(t)
		rec := &lookupRecorder{Transactor: st}
		w := outbox.NewWriter(rec, nil)
		occurred := time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC)
		_, err := w.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		require.Equal(t, []string{outbox.DeriveKey("src", "d1", occurred)}, rec.last(), "no key of the old form is stored")

		events, entries, err := w.Records([]outbox.Input{input("old")})
		require.NoError(t, err)
		events[0].IdempotencyKey = outbox.HashedDerivedKey("src", "old", occurred)
		insertRecords(t, st, events, entries)
		named := input("d3")
		named.Client = "acme"
		_, err = w.Write(ctx, []outbox.Input{input("d2"), named})
		require.NoError(t, err)
		require.Equal(t, []string{outbox.DeriveKey("src", "d2", occurred), outbox.HashedDerivedKey("src", "d2", occurred),
			outbox.ClientKey("acme", outbox.DeriveKey("src", "d3", occurred))}, rec.last(),
			"the default namespace holds a key of the old form, acme's none")
	})

	// An event id drawn when the request was prepared that another
	// original has taken by the time of the transaction fails the store's
	// unique index (ErrDuplicateKey); the writer's next run draws new ids.
	t.Run("TakenEventIDIsDrawnAgain", func(t *testing.T) {
		t.Parallel()
		st := testkit.NewSQLite(t)
		taker := &idTaker{Transactor: st}
		w := outbox.NewWriter(taker, nil)
		res, err := w.Write(ctx, []outbox.Input{input("d1"), input("d2")})
		require.NoError(t, err)
		require.NotEmpty(t, taker.taken)
		require.NotEqual(t, taker.taken, res[0].ID)
		require.Equal(t, 3, taker.runs, "the run that captured the id, the one that failed on it, the one with new ids")
		testkit.RequireStored(t, st, 3)
		for i, r := range res {
			ev := testkit.Event(t, st, r.ID)
			require.Equal(t, outbox.DeriveKey("src", "d"+strconv.Itoa(i+1), time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC)), ev.IdempotencyKey)
		}
		require.Equal(t, "taken", testkit.Event(t, st, taker.taken).SourceKey)
	})

	t.Run("RecordsMatchWhatWriteStores", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		events, entries, err := b.writer.Records([]outbox.Input{input("d1"), input("d2")})
		require.NoError(t, err)
		require.Len(t, entries, 2)
		require.Equal(t, events[1].ID, entries[1].EventID)
		testkit.Seed(t, b.st, b.writer, []outbox.Input{input("d1"), input("d2")})
		// Write sees the seeded originals as the same content: duplicates.
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2")})
		require.NoError(t, err)
		require.True(t, res[0].Duplicate && res[1].Duplicate)
		_, _, err = b.writer.Records([]outbox.Input{{SourceKey: "s"}})
		require.ErrorIs(t, err, outbox.ErrInvalid)
	})
}

// TestWriteInCallersTransaction writes events inside a transaction the
// caller runs, with the caller's own rows: on SQLite (a *sql.Tx) and on
// MongoDB (a session), the caller's abort takes the events with it and its
// commit keeps both.
func TestWriteInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errAbort := errors.New("caller aborts")

	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		st := testkit.NewSQLite(t)
		w := outbox.NewWriter(st, nil)
		_, err := st.DB().ExecContext(ctx, `CREATE TABLE orders (n INTEGER)`)
		require.NoError(t, err)
		run := func(commit bool) error {
			tx, err := st.DB().BeginTx(ctx, nil)
			require.NoError(t, err)
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (1)`); err != nil {
				return err
			}
			if _, err := w.WriteInTx(ctx, st.Tx(tx), []outbox.Input{input("d1")}); err != nil {
				return err
			}
			if !commit {
				require.NoError(t, tx.Rollback())
				return errAbort
			}
			return tx.Commit()
		}
		orders := func() (n int) {
			require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n))
			return n
		}
		require.ErrorIs(t, run(false), errAbort)
		require.Equal(t, 0, orders())
		testkit.RequireStored(t, st, 0)
		require.NoError(t, run(true))
		require.Equal(t, 1, orders())
		testkit.RequireStored(t, st, 1)
	})

	t.Run("MongoDB", func(t *testing.T) {
		t.Parallel()
		st := testkit.NewMongo(t, nil)
		w := outbox.NewWriter(st, nil)
		orders := mongoseam.Database(st).Collection("orders")
		err := mongoseam.RunTx(ctx, st, func(sc lungo.ISessionContext, tx outbox.Tx) error {
			if _, err := orders.InsertOne(sc, bson.M{"n": 1}); err != nil {
				return err
			}
			if _, err := w.WriteInTx(sc, tx, []outbox.Input{input("d1")}); err != nil {
				return err
			}
			return errAbort
		})
		require.ErrorIs(t, err, errAbort)
		n, err := orders.CountDocuments(ctx, bson.M{})
		require.NoError(t, err)
		require.Zero(t, n)
		testkit.RequireStored(t, st, 0)

		err = mongoseam.RunTx(ctx, st, func(sc lungo.ISessionContext, tx outbox.Tx) error {
			if _, err := orders.InsertOne(sc, bson.M{"n": 1}); err != nil {
				return err
			}
			_, err := w.WriteInTx(sc, tx, []outbox.Input{input("d1")})
			return err
		})
		require.NoError(t, err)
		n, err = orders.CountDocuments(ctx, bson.M{})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		testkit.RequireStored(t, st, 1)
	})
}

// TestWriterMessage: the outbox entry's message always carries the
// original's type; with MessageOptions.Payload its payload too, and a
// payload over PayloadMax goes by reference.
func TestWriterMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	messages := func(opts *outbox.MessageOptions, inputs ...outbox.Input) []outbox.Message {
		t.Helper()
		w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: testkit.Name("msg"), Message: opts})
		_, err := w.Write(ctx, inputs)
		require.NoError(t, err)
		entries, err := st.Undispatched(ctx, w.Stream(), store.Partition{Count: 1}, "", 10)
		require.NoError(t, err)
		var out []outbox.Message
		for _, e := range entries {
			m, err := outbox.DecodeMessage(map[string]any{outbox.PayloadField: e.Message})
			require.NoError(t, err)
			out = append(out, m)
		}
		return out
	}
	small := outbox.Input{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z", Type: "order.placed", Payload: json.RawMessage(`{"total":12.5}`)}
	big := outbox.Input{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T11:00:00Z", Type: "order.placed",
		Payload: json.RawMessage(`{"note":"` + strings.Repeat("x", 100) + `"}`)}

	m := messages(nil, small)
	require.Len(t, m, 1)
	require.Equal(t, "order.placed", m[0].Type, "the type always")
	require.Nil(t, m[0].Payload, "no payload by default")
	require.False(t, m[0].PayloadRef)

	small.OccurredAt = "2026-11-01T12:00:00Z" // another original
	m = messages(&outbox.MessageOptions{Payload: true, PayloadMax: 50}, small, big)
	require.Len(t, m, 2)
	require.JSONEq(t, `{"total":12.5}`, string(m[0].Payload))
	require.False(t, m[0].PayloadRef)
	require.Nil(t, m[1].Payload, "over the bound: by reference")
	require.True(t, m[1].PayloadRef)
}

// insertRecords stores events and entries as they are, in one transaction
// (an original under a key the writer would not make, as 0.1.0 did).
func insertRecords(t *testing.T, st outbox.Transactor, events []outbox.Event, entries []outbox.Entry) {
	t.Helper()
	require.NoError(t, storeRecords(context.Background(), st, events, entries))
}

// storeRecords is insertRecords returning its error.
func storeRecords(ctx context.Context, st outbox.Transactor, events []outbox.Event, entries []outbox.Entry) error {
	return st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return tx.InsertEntries(ctx, entries)
	})
}

// idTaker is a Transactor that, at its first transaction, learns the id
// the writer gives its first original (a run rolled back), commits another
// original under that id, and then runs the transaction: a taken id as a
// concurrent writer could leave it. It counts the runs of the writer's fn.
type idTaker struct {
	outbox.Transactor
	taken string
	runs  int
}

var errCaptured = errors.New("id captured")

func (r *idTaker) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	if r.taken == "" {
		err := r.Transactor.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			r.runs++
			return fn(ctx, &capturingTx{Tx: tx, r: r})
		})
		if !errors.Is(err, errCaptured) {
			return fmt.Errorf("capturing the id: %w", err)
		}
		w := outbox.NewWriter(r.Transactor, nil)
		events, entries, err := w.Records([]outbox.Input{{SourceKey: "taken", DeviceKey: "d", OccurredAt: "2026-11-01T09:00:00Z"}})
		if err != nil {
			return err
		}
		events[0].ID, entries[0].EventID = r.taken, r.taken
		if err := storeRecords(ctx, r.Transactor, events, entries); err != nil {
			return err
		}
	}
	return r.Transactor.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		r.runs++
		return fn(ctx, tx)
	})
}

type capturingTx struct {
	outbox.Tx
	r *idTaker
}

func (t *capturingTx) InsertEvents(_ context.Context, events []outbox.Event) error {
	t.r.taken = events[0].ID
	return errCaptured
}

// lookupRecorder is a Transactor whose Tx records the keys of each
// LookupKeys and forwards outbox.KeyRanger.
type lookupRecorder struct {
	outbox.Transactor
	mu   sync.Mutex
	keys [][]string
}

func (r *lookupRecorder) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	return r.Transactor.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		return fn(ctx, &recordingTx{Tx: tx, r: r})
	})
}

func (r *lookupRecorder) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[len(r.keys)-1]
}

type recordingTx struct {
	outbox.Tx
	r *lookupRecorder
}

func (t *recordingTx) LookupKeys(ctx context.Context, keys []string) (map[string]outbox.KeyRecord, error) {
	t.r.mu.Lock()
	t.r.keys = append(t.r.keys, slices.Clone(keys))
	t.r.mu.Unlock()
	return t.Tx.LookupKeys(ctx, keys)
}

func (t *recordingTx) AnyKeyBetween(ctx context.Context, from, to string) (bool, error) {
	return t.Tx.(outbox.KeyRanger).AnyKeyBetween(ctx, from, to)
}
