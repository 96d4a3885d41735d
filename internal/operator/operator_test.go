package operator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

var _ operator.ReadModel = (*readmodel.DB)(nil)

func TestMain(m *testing.M) { testkit.Main(m) }

const waitFor = 30 * time.Second

// testBundle is one test's stores, stream and operator.
type testBundle struct {
	st   store.Store
	rc   *stream.Client
	rdb  redis.UniversalClient
	pg   *testkit.Postgres
	keys stream.Keys
	w    *outbox.Writer
	op   *operator.Operator
	now  time.Time
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	b := &testBundle{st: testkit.NewStore(t), rc: rc, rdb: rdb, pg: testkit.NewPostgres(t), keys: stream.NewKeys(prefix+":stream", "g"),
		now: time.Date(2026, 11, 2, 3, 4, 5, 678_000_000, time.UTC)}
	b.w = outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.keys.Name()})
	b.op, err = operator.New(&operator.Config{Store: b.st, Redis: rc, ReadModel: readmodel.New(b.pg.Pool),
		Stream: b.keys.Name(), Group: b.keys.Group(), Role: "work", Now: func() time.Time { return b.now.Add(time.Minute) }}, testkit.Logger(t))
	require.NoError(t, err)
	return b
}

// write stores one original per device and returns them.
func (b *testBundle) write(t *testing.T, devices ...string) []*outbox.Event {
	t.Helper()
	inputs := make([]outbox.Input, len(devices))
	for i, d := range devices {
		inputs[i] = outbox.Input{SourceKey: "src", DeviceKey: d, OccurredAt: "2026-11-01T10:00:00Z"}
	}
	res, err := b.w.Write(context.Background(), inputs)
	require.NoError(t, err)
	out := make([]*outbox.Event, len(res))
	for i, r := range res {
		out[i] = testkit.Event(t, b.st, r.ID)
	}
	return out
}

// TestDeadLetterFromWorkerToOperator: a real poison record and a real
// unreadable message are dead-lettered by the worker, and the operator
// reads every field of each as the worker wrote it (one record,
// stream.DeadLetter, on both sides).
func TestDeadLetterFromWorkerToOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	events := b.write(t, "good", "bad")
	good, bad := events[0], events[1]
	p := b.rc.Publisher(b.keys, nil, nil)
	require.NoError(t, p.PublishEvents(ctx, []*outbox.Event{good, bad}, outbox.OriginOutbox))
	require.NoError(t, p.Publish(ctx, []string{"{not json"}))
	entries, _, _, err := b.rc.ScanBack(ctx, b.keys.Stream(), time.Time{}, 10, func(stream.Entry) bool { return true })
	require.NoError(t, err)
	require.Len(t, entries, 3)
	badEntry, junkEntry := entries[1], entries[2]

	projector := readmodel.NewProjector()
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{
		Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c", Block: 50 * time.Millisecond,
		MaxDeliveries: 2, RecordBackoff: 10 * time.Millisecond, Now: func() time.Time { return b.now },
		Projector: worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			for _, ev := range events {
				if ev.ID == bad.ID {
					return fmt.Errorf("%w: a projection bug", worker.ErrRecord)
				}
			}
			return projector.Project(ctx, tx, events)
		}),
	}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	require.Eventually(t, func() bool {
		n, err := b.rc.Len(ctx, b.keys.DLQ())
		return err == nil && n == 2 && testkit.Event(t, b.st, bad.ID).State() == outbox.StateFailed
	}, waitFor, 10*time.Millisecond)

	page, err := b.op.ListDLQ(ctx, operator.DLQQuery{})
	require.NoError(t, err)
	require.Equal(t, b.keys.DLQ(), page.Stream)
	require.Equal(t, int64(2), page.Length)
	require.Len(t, page.Entries, 2)
	byEntry := map[string]operator.DeadLetter{}
	for _, dl := range page.Entries {
		at, ok := stream.IDTime(dl.ID)
		require.True(t, ok, "its own id in the dead-letter stream: %q", dl.ID)
		require.False(t, at.IsZero())
		byEntry[dl.EntryID] = dl
	}

	poison := byEntry[badEntry.ID]
	require.Equal(t, bad.ID, poison.EventID)
	require.Equal(t, outbox.CategoryPoison, poison.Category)
	require.Equal(t, "projection_failed", poison.Code)
	require.Equal(t, poison.Code, poison.Reason)
	require.Contains(t, poison.Error, "a projection bug")
	require.Equal(t, badEntry.ID, poison.EntryID)
	require.Equal(t, [3]string{b.keys.Stream(), "g", "c"}, [3]string{poison.Stream, poison.Group, poison.Consumer})
	require.Equal(t, int64(2), poison.Deliveries)
	require.Equal(t, b.now, poison.At)
	require.Equal(t, 60.0, poison.AgeSeconds)
	require.Equal(t, outbox.StateFailed, poison.Original)
	require.Equal(t, bad.Message(outbox.OriginOutbox).Encode(), poison.Payload)
	require.Nil(t, poison.Event, "the listing leaves the original out")

	junk := byEntry[junkEntry.ID]
	require.Empty(t, junk.EventID, "the message named no original")
	require.Equal(t, outbox.CategoryNonRetryable, junk.Category)
	require.Equal(t, "bad_message", junk.Code)
	require.Equal(t, "bad_message", junk.Reason)
	require.NotEmpty(t, junk.Error)
	require.Equal(t, [3]string{b.keys.Stream(), "g", "c"}, [3]string{junk.Stream, junk.Group, junk.Consumer})
	require.Zero(t, junk.Deliveries, "dead-lettered at its first look")
	require.Equal(t, b.now, junk.At)
	require.Equal(t, operator.OriginalMissing, junk.Original)
	require.Equal(t, "{not json", junk.Payload)

	one, err := b.op.DeadLetter(ctx, poison.ID)
	require.NoError(t, err)
	require.NotNil(t, one.Event)
	require.Equal(t, bad.IdempotencyKey, one.Event.IdempotencyKey)
	require.Equal(t, "projection_failed", one.Event.SyncFailure.Code, "the original's syncFailure has the same code")
	one.Event = nil
	require.Equal(t, poison, *one)

	coded, err := b.op.ListDLQ(ctx, operator.DLQQuery{Code: "bad_message"})
	require.NoError(t, err)
	require.Len(t, coded.Entries, 1)
	require.Equal(t, junk.ID, coded.Entries[0].ID)
}

// TestErrors: each kind of error is an *operator.Error that errors.Is
// matches, with the field or backend it names.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	kind := func(t *testing.T, err error, want error) *operator.Error {
		t.Helper()
		require.ErrorIs(t, err, want)
		var oe *operator.Error
		require.True(t, errors.As(err, &oe), "%T %v", err, err)
		return oe
	}
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name  string
			call  func() error
			field string
		}{
			{"DLQLimit", func() error { _, err := b.op.ListDLQ(ctx, operator.DLQQuery{Limit: operator.ChunkMax + 1}); return err }, "limit"},
			{"ReplayWithoutFrom", func() error {
				_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{To: day}})
				return err
			}, "from"},
			{"ReplayEmptyWindow", func() error {
				_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day}})
				return err
			}, "to"},
			{"EventsDeviceWithoutSource", func() error {
				_, err := b.op.ListEvents(ctx, operator.EventsQuery{DeviceKey: "d"})
				return err
			}, "sourceKey"},
			{"EventsBadBy", func() error { _, err := b.op.ListEvents(ctx, operator.EventsQuery{By: "day"}); return err }, "by"},
			{"VerifyBadCursor", func() error { _, err := b.op.Verify(ctx, operator.VerifyQuery{After: "x"}); return err }, "after"},
			{"DLQNothingNamed", func() error { _, err := b.op.DropDLQ(ctx, operator.DLQAction{}); return err }, "ids"},
			{"JourneyRef", func() error { _, err := b.op.Journey(ctx, ""); return err }, "ref"},
			{"ReplayBadState", func() error {
				_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(time.Hour), State: "lost"}})
				return err
			}, "state"},
			{"ReplayBadCursor", func() error {
				_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(time.Hour), After: "x"}})
				return err
			}, "after"},
			{"ReplayTooBigChunk", func() error {
				_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(time.Hour), Limit: 100000}})
				return err
			}, "limit"},
			{"EventsBadState", func() error { _, err := b.op.ListEvents(ctx, operator.EventsQuery{State: "lost"}); return err }, "state"},
			{"EventsEmptyWindow", func() error {
				_, err := b.op.ListEvents(ctx, operator.EventsQuery{From: day.Add(time.Hour), To: day})
				return err
			}, "to"},
			{"DLQBadAfter", func() error { _, err := b.op.ListDLQ(ctx, operator.DLQQuery{After: "abc"}); return err }, "after"},
			{"DLQAfterWithoutSequence", func() error {
				_, err := b.op.ListDLQ(ctx, operator.DLQQuery{After: "1700000000000"})
				return err
			}, "after"},
			{"DLQAfterBadSequence", func() error { _, err := b.op.ListDLQ(ctx, operator.DLQQuery{After: "1-x"}); return err }, "after"},
			{"DLQAfterSigned", func() error { _, err := b.op.ListDLQ(ctx, operator.DLQQuery{After: "-1-0"}); return err }, "after"},
			{"DeadLetterBadID", func() error { _, err := b.op.DeadLetter(ctx, "abc"); return err }, "id"},
			{"DLQIdsAndAll", func() error {
				_, err := b.op.DropDLQ(ctx, operator.DLQAction{IDs: []string{"1-0"}, All: true})
				return err
			}, "all"},
			{"DLQBadID", func() error { _, err := b.op.DropDLQ(ctx, operator.DLQAction{IDs: []string{"one"}}); return err }, "ids"},
			{"DLQActionBadAfter", func() error {
				_, err := b.op.ReplayDLQ(ctx, operator.DLQAction{All: true, After: "abc"})
				return err
			}, "after"},
			{"RetriesNoClass", func() error { _, err := b.op.ResumeRetries(ctx, operator.RetriesQuery{}); return err }, "class"},
			{"RetriesBadClass", func() error {
				_, err := b.op.ResumeRetries(ctx, operator.RetriesQuery{Class: "poison"})
				return err
			}, "class"},
			{"PauseBadStage", func() error { _, err := b.op.Pause(ctx, operator.PauseQuery{Stage: "lane"}); return err }, "stage"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				oe := kind(t, tt.call(), operator.ErrInvalid)
				require.Len(t, oe.Fields, 1)
				require.Equal(t, tt.field, oe.Fields[0].Field)
				require.Contains(t, oe.Error(), tt.field)
			})
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		_, err := b.op.DeadLetter(ctx, "1-1")
		require.Equal(t, "no dead letter has this id", kind(t, err, operator.ErrNotFound).Detail)
		_, err = b.op.Journey(ctx, "nobody")
		kind(t, err, operator.ErrNotFound)
	})

	t.Run("NotAvailable", func(t *testing.T) {
		t.Parallel()
		op, err := operator.New(&operator.Config{Store: b.st, Role: "ingest"}, nil)
		require.NoError(t, err)
		_, err = op.ListDLQ(ctx, operator.DLQQuery{})
		oe := kind(t, err, operator.ErrNotAvailable)
		require.Equal(t, operator.BackendRedis, oe.Backend)
		require.Contains(t, oe.Detail, "ingest")
		_, err = op.Verify(ctx, operator.VerifyQuery{})
		require.Equal(t, operator.BackendPostgres, kind(t, err, operator.ErrNotAvailable).Backend)
		// Counting needs the store only.
		res, err := op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(24 * time.Hour)}, DryRun: true})
		require.NoError(t, err)
		require.Zero(t, *res.Count)
	})

	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		rc, err := stream.NewClient(srv.Client(), nil)
		require.NoError(t, err)
		op, err := operator.New(&operator.Config{Store: b.st, Redis: rc}, nil)
		require.NoError(t, err)
		srv.Stop()
		_, err = op.ListDLQ(ctx, operator.DLQQuery{})
		require.Equal(t, operator.BackendRedis, kind(t, err, operator.ErrUnavailable).Backend)
		_, err = op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(24 * time.Hour)}})
		require.NoError(t, err, "an empty window publishes nothing")
	})
}

// TestTypedWindows: the queries take times, and a zero bound is open where
// a window may be.
func TestTypedWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	events := b.write(t, "d1", "d2", "d3")
	at := events[0].OccurredAt
	res, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: at, To: at.Add(time.Millisecond), SourceKey: "src", DeviceKey: "d2"}, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), *res.Count)
	page, err := b.op.ListEvents(ctx, operator.EventsQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Events, 2, "open on both sides")
	require.NotEmpty(t, page.Next)
	more, err := b.op.ListEvents(ctx, operator.EventsQuery{From: at, After: page.Next, Limit: 2})
	require.NoError(t, err)
	require.Len(t, more.Events, 1)
	require.Empty(t, more.Next)
	none, err := b.op.ListEvents(ctx, operator.EventsQuery{To: at})
	require.NoError(t, err)
	require.Empty(t, none.Events, "[zero, at) holds none")
}

// TestDLQPartitions: with P = 4 the dead letters sit in each partition's
// dead-letter stream; dlq list, replay and drop cover every one, in id
// order across partitions, and the journey finds an event's own.
func TestDLQPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const partitions = 4
	b := setup(t)
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: readmodel.New(b.pg.Pool),
		Stream: b.keys.Name(), Group: b.keys.Group(), Role: "work", Partitions: partitions}, testkit.Logger(t))
	require.NoError(t, err)
	var devices []string
	for i := range 12 {
		devices = append(devices, fmt.Sprintf("dev-%d", i))
	}
	events := b.write(t, devices...)
	split := b.keys.Split(partitions)
	used := map[int]bool{}
	for _, ev := range events {
		used[split.ForEvent(ev.SourceKey, ev.DeviceKey).PartitionIndex()] = true
	}
	require.Greater(t, len(used), 1, "the events spread over several partitions")
	require.NoError(t, b.rc.Publisher(split, nil, nil).PublishEvents(ctx, events, outbox.OriginOutbox))
	var workers []*worker.Worker
	for p := range partitions {
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{
			Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c", Partition: p, Partitions: partitions,
			Block: 50 * time.Millisecond, MaxDeliveries: 1,
			Projector: worker.ProjectorFunc(func(context.Context, pgx.Tx, []*outbox.Event) error {
				return fmt.Errorf("%w: a projection bug", worker.ErrRecord)
			}),
		}, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
		workers = append(workers, w)
	}
	dlqLen := func() int64 {
		var n int64
		for _, k := range split.AllPartitions() {
			l, err := b.rc.Len(ctx, k.DLQ())
			require.NoError(t, err)
			n += l
		}
		return n
	}
	require.Eventually(t, func() bool { return dlqLen() == int64(len(events)) }, waitFor, 10*time.Millisecond)
	for _, w := range workers { // a replayed event would fail again
		require.NoError(t, w.Stop(ctx))
	}
	unpartitioned, err := b.rc.Len(ctx, b.keys.DLQ())
	require.NoError(t, err)
	require.Zero(t, unpartitioned, "P = 4: nothing in the stream's own dead-letter stream")

	// list: every partition's, paged in id order.
	page, err := op.ListDLQ(ctx, operator.DLQQuery{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, int64(len(events)), page.Length)
	require.Equal(t, split.DLQ()+" (4 partitions)", page.Stream)
	require.Len(t, page.Entries, len(events))
	var paged []string
	after := ""
	for {
		p, err := op.ListDLQ(ctx, operator.DLQQuery{Limit: 5, After: after})
		require.NoError(t, err)
		for _, dl := range p.Entries {
			paged = append(paged, dl.ID)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	require.Len(t, paged, len(events))
	require.True(t, slices.IsSortedFunc(paged, stream.CompareIDs), "id order across partitions")

	// the journey finds the event's dead letter in its partition.
	j, err := op.Journey(ctx, events[0].ID)
	require.NoError(t, err)
	require.Len(t, j.Stream.DeadLetters, 1)
	require.NotEmpty(t, j.Stream.Entries)

	// drop one by id, replay the rest with --all.
	dropped := page.Entries[0]
	res, err := op.DropDLQ(ctx, operator.DLQAction{IDs: []string{dropped.ID}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped)
	require.Equal(t, int64(len(events)-1), dlqLen())
	res, err = op.ReplayDLQ(ctx, operator.DLQAction{All: true, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, len(events)-1, res.Replayed)
	require.True(t, res.Done)
	require.Zero(t, dlqLen(), "every partition's dead letters replayed or dropped")
}
