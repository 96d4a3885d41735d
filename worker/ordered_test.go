package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/checker"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// orderRecorder is a Projector (over the default one) that records, per
// device, the events it projected, and every event projected for the first
// time while a later event of its device already was: the order checker.
// Only successful calls count (a failed call's transaction rolls back).
type orderRecorder struct {
	inner worker.Projector
	index map[string]int // event id -> its place among its device's events

	mu         sync.Mutex
	seen       map[string]bool
	last       map[string]int // device -> highest place projected
	violations []string
	calls      atomic.Int64
}

func newOrderRecorder(events []*outbox.Event) *orderRecorder {
	r := &orderRecorder{inner: readmodel.NewProjector(), index: map[string]int{}, seen: map[string]bool{}, last: map[string]int{}}
	n := map[string]int{}
	for _, ev := range events {
		r.index[ev.ID] = n[ev.DeviceKey]
		n[ev.DeviceKey]++
	}
	return r
}

// Project projects events and records their order.
func (r *orderRecorder) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	r.calls.Add(1)
	if err := r.inner.Project(ctx, tx, events); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range events {
		if r.seen[ev.ID] {
			continue // a redelivery: at-least-once
		}
		r.seen[ev.ID] = true
		i := r.index[ev.ID]
		if last, ok := r.last[ev.DeviceKey]; ok && i < last {
			r.violations = append(r.violations, fmt.Sprintf("device %s: event #%d after #%d", ev.DeviceKey, i, last))
		}
		r.last[ev.DeviceKey] = max(r.last[ev.DeviceKey], i)
	}
	return nil
}

func (r *orderRecorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.violations, "events projected out of their device's order")
}

// projectorFunc wraps r, calling before on each call.
func (r *orderRecorder) with(before func()) worker.Projector {
	return worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
		before()
		return r.Project(ctx, tx, events)
	})
}

// TestOrdered: with Config.Ordered one worker at a time owns a partition
// and projects it in stream order, through a crash mid-batch and a
// hand-over to another worker (two workers per partition, P = 4).
func TestOrdered(t *testing.T) {
	t.Parallel()
	const partitions, devices, perDevice = 4, 8, 40
	b := setup(t)
	keys := stream.NewKeys(b.stream, b.group).Split(partitions)
	var first, second []*outbox.Event
	for d := range devices {
		evs := b.write(t, fmt.Sprintf("dev-%d", d), perDevice)
		first, second = append(first, evs[:perDevice/2]...), append(second, evs[perDevice/2:]...)
	}
	rec := newOrderRecorder(b.events)
	publish := func(events []*outbox.Event) {
		_, err := b.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for _, ev := range events {
				p.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.ForEvent(ev.SourceKey, ev.DeviceKey).Stream(),
					Values: ev.Message(outbox.OriginOutbox).Values()})
			}
			return nil
		})
		require.NoError(t, err)
	}
	// Interleave the devices in the stream, as ingest does.
	interleave := func(events []*outbox.Event) []*outbox.Event {
		var out []*outbox.Event
		per := len(events) / devices
		for i := range per {
			for d := range devices {
				out = append(out, events[d*per+i])
			}
		}
		return out
	}
	publish(interleave(first))

	faults := &fault.Set{}
	var aCalls, bCalls atomic.Int64
	cfg := func(consumer string, p int, calls *atomic.Int64, faults *fault.Set) *worker.Config {
		c := b.config(fmt.Sprintf("%s-%d", consumer, p))
		c.Partition, c.Partitions, c.Ordered, c.LeaseTTL, c.BatchSize = p, partitions, true, 300*time.Millisecond, 7
		c.ClaimIdle = time.Minute // only the lease hands entries over
		c.Projector = rec.with(func() {
			if calls.Add(1) == 6 && faults != nil {
				faults.Arm(worker.FaultAfterCommit, 1) // this batch commits, then its worker dies
			}
		})
		if faults != nil {
			worker.SetFaults(c, faults)
		}
		return c
	}
	var as []*worker.Worker
	for p := range partitions {
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg("a", p, &aCalls, faults), testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(context.Background()))
		as = append(as, w)
	}
	for p := range partitions {
		b.start(t, cfg("b", p, &bCalls, nil))
	}
	// A worker of A dies after a commit, before its XACK: B takes its
	// partition when the lease runs out and claims the batch first.
	require.Eventually(t, func() bool { return faults.Hits(worker.FaultAfterCommit) == 1 }, waitFor, 5*time.Millisecond)
	// The others hand over: they stop and release their leases.
	for _, w := range as {
		_ = w.Stop(context.Background())
	}
	aDone := aCalls.Load()
	publish(interleave(second))

	want := int64(len(b.events))
	require.Eventually(t, func() bool {
		rows, _ := b.rows(t)
		return rows == want && b.unsynced(t) == 0 && pendingAll(t, b, keys) == 0
	}, waitFor, 10*time.Millisecond)
	rec.check(t)
	require.Positive(t, aDone, "A projected before the crash")
	require.Positive(t, bCalls.Load(), "B projected after the hand-over")
	require.Equal(t, aDone, aCalls.Load(), "a stopped worker projects nothing more")

	accepted := make([]string, len(b.events))
	for i, ev := range b.events {
		accepted[i] = ev.IdempotencyKey
	}
	v, err := checker.Check(context.Background(), checker.Input{Store: b.st, Pool: b.pg.Pool, Accepted: accepted,
		PendingEntries: func(context.Context) (int64, error) { return pendingAll(t, b, keys), nil }})
	require.NoError(t, err)
	v.Undispatched = 0 // no dispatcher here: the test publishes itself
	require.True(t, v.OK(), v.String())
	rows, stats := b.rows(t)
	require.Equal(t, rows, stats)
}

// pendingAll counts the entries pending in every partition.
func pendingAll(t *testing.T, b *testBundle, keys stream.Keys) int64 {
	t.Helper()
	var n int64
	for _, k := range keys.AllPartitions() {
		c, err := testkit.PendingEntries(context.Background(), b.rdb, k.Stream(), k.Group())
		require.NoError(t, err)
		n += c
	}
	return n
}

// TestOrderedFailingEntry: a failing entry holds the entries after it
// until it goes through, or, its deliveries spent, is dead-lettered; then
// the partition moves on. Without Ordered the later entries pass it (the
// control, which shows the checker fails).
func TestOrderedFailingEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ordered    bool
		failures   int // deliveries of event #5 that fail
		violations bool
	}{
		{name: "GoesThroughOnItsThirdDelivery", ordered: true, failures: 2},
		{name: "PoisonIsDeadLetteredThenThePartitionMovesOn", ordered: true, failures: -1},
		{name: "WithoutOrderedLaterEntriesPass", ordered: false, failures: 2, violations: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			events := b.write(t, "dev", 12)
			bad := events[5]
			rec := newOrderRecorder(events)
			var mu sync.Mutex
			failed := 0
			var early []string // later events projected before #5's last failure
			cfg := b.config("w")
			cfg.Ordered, cfg.LeaseTTL, cfg.MaxDeliveries = tc.ordered, 300*time.Millisecond, 3
			cfg.Projector = worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, evs []*outbox.Event) error {
				mu.Lock()
				defer mu.Unlock()
				for _, ev := range evs {
					if ev.ID == bad.ID && (tc.failures < 0 || failed < tc.failures) {
						if len(evs) == 1 { // the delivery's own try (a batch's failing try comes first)
							failed++
						}
						return fmt.Errorf("%w: event #5 fails", worker.ErrRecord)
					}
				}
				done := tc.failures >= 0 && failed >= tc.failures || tc.failures < 0 && failed >= cfg.MaxDeliveries
				for _, ev := range evs {
					if rec.index[ev.ID] > 5 && !done {
						early = append(early, ev.ID)
					}
				}
				return rec.Project(ctx, tx, evs)
			})
			b.publish(t, events...)
			b.start(t, cfg)
			if tc.failures < 0 {
				b.parked = 1
				b.events = without(events, bad)
			}
			require.Eventually(t, func() bool {
				rows, _ := b.rows(t)
				return b.drained(t) && rows == int64(len(b.events))
			}, waitFor, 10*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if tc.violations {
				require.NotEmpty(t, early, "without Ordered the later entries pass the failing one")
				return
			}
			require.Empty(t, early, "an entry after the failing one was projected before it went through or was dead-lettered")
			rec.check(t)
			if tc.failures < 0 {
				n, err := b.rdb.XLen(context.Background(), b.keys().DLQ()).Result()
				require.NoError(t, err)
				require.EqualValues(t, 1, n)
				require.Equal(t, cfg.MaxDeliveries, failed)
				require.Equal(t, outbox.CategoryPoison, b.event(t, bad.ID).SyncFailure.Category)
				b.check(t)
				return
			}
			b.waitConverged(t)
		})
	}
}

// without returns events without drop.
func without(events []*outbox.Event, drop *outbox.Event) []*outbox.Event {
	var out []*outbox.Event
	for _, ev := range events {
		if ev.ID != drop.ID {
			out = append(out, ev)
		}
	}
	return out
}

// TestOrderedPoisonedDeviceHoldsOnlyItself: under Ordered, one device's
// failing event holds only that device's later events (its message
// group); the other devices of the partition go on in order while it
// fails, and the held device follows in order once its event goes through
// or is dead-lettered.
func TestOrderedPoisonedDeviceHoldsOnlyItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		poison bool // the event never goes through: dead-lettered
	}{
		{name: "GoesThroughLater"},
		{name: "DeadLettered", poison: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const devices, perDevice, badAt = 8, 12, 3
			b := setup(t)
			var byDevice [][]*outbox.Event
			for d := range devices {
				byDevice = append(byDevice, b.write(t, fmt.Sprintf("dev-%d", d), perDevice))
			}
			var interleaved []*outbox.Event
			for i := range perDevice {
				for d := range devices {
					interleaved = append(interleaved, byDevice[d][i])
				}
			}
			bad := byDevice[0][badAt]
			rec := newOrderRecorder(b.events)
			var failing atomic.Bool
			failing.Store(true)
			cfg := b.config("w")
			cfg.Ordered, cfg.LeaseTTL, cfg.BatchSize = true, 300*time.Millisecond, 10
			cfg.MaxDeliveries = 1000 // fails until the test lets it through
			if tc.poison {
				cfg.MaxDeliveries = 3
			}
			cfg.Projector = worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, evs []*outbox.Event) error {
				for _, ev := range evs {
					if ev.ID == bad.ID && failing.Load() {
						return fmt.Errorf("%w: a poisoned event", worker.ErrRecord)
					}
				}
				return rec.Project(ctx, tx, evs)
			})
			b.publish(t, interleaved...)
			b.start(t, cfg)

			if !tc.poison {
				// Every other device is projected whole while dev-0's event
				// keeps failing; dev-0 stops before it.
				want := int64((devices-1)*perDevice + badAt)
				require.Eventually(t, func() bool { rows, _ := b.rows(t); return rows == want }, waitFor, 10*time.Millisecond,
					"the other devices of the partition were held by dev-0's failing event")
				var dev0 int64
				require.NoError(t, b.pg.Pool.QueryRow(context.Background(),
					`SELECT count(*) FROM events WHERE device_key = 'dev-0'`).Scan(&dev0))
				require.EqualValues(t, badAt, dev0, "dev-0's events after the failing one wait behind it")
				failing.Store(false)
				b.waitConverged(t)
				rec.check(t)
				return
			}
			b.parked = 1
			b.events = without(b.events, bad)
			b.waitDeadLetters(t, 1)
			rows, _ := b.rows(t)
			require.EqualValues(t, len(b.events), rows)
			rec.check(t)
			require.Equal(t, outbox.CategoryPoison, b.event(t, bad.ID).SyncFailure.Category)
			b.check(t)
		})
	}
}

// TestOrderedDeferredEntriesMarkedHeld: ordered, the later events of a
// device whose event fails wait behind it, and are marked held for the
// reconciler (stream.Keys.Held) at least as long as the failing one, so
// that it publishes no copy of them meanwhile: read in the failing
// event's batch, or in a later batch behind the entry the worker holds.
func TestOrderedDeferredEntriesMarkedHeld(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		sameBatch bool
	}{
		{name: "SameBatch", sameBatch: true},
		{name: "LaterBatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			evs := b.write(t, "dev-0", 2)
			failing, later := evs[0], evs[1]
			cfg := b.config("w")
			cfg.Ordered, cfg.LeaseTTL = true, 300*time.Millisecond
			cfg.MaxDeliveries, cfg.RecordBackoff = 1000, time.Minute // held all along
			cfg.Projector = failOn(func(ev *outbox.Event, _ bool) error {
				if ev.ID == failing.ID {
					return fmt.Errorf("%w: a poisoned event", worker.ErrRecord)
				}
				return nil
			})
			held := func(id string) time.Time {
				ms, err := b.rdb.HGet(ctx, b.keys().Held(), id).Int64()
				if err != nil {
					return time.Time{}
				}
				return time.UnixMilli(ms)
			}
			if tc.sameBatch {
				b.publish(t, failing, later)
			} else {
				b.publish(t, failing)
			}
			b.start(t, cfg)
			require.Eventually(t, func() bool { return !held(failing.ID).IsZero() }, waitFor, 5*time.Millisecond,
				"the failing event is marked held")
			if !tc.sameBatch {
				b.publish(t, later)
			}
			require.Eventually(t, func() bool { return !held(later.ID).IsZero() }, waitFor, 5*time.Millisecond,
				"the event waiting behind the failing one is marked held")
			require.False(t, held(later.ID).Before(held(failing.ID)), "marked held at least as long as the failing event")
			require.Greater(t, time.Until(held(later.ID)), cfg.RecordBackoff/2)
			rows, _ := b.rows(t)
			require.Zero(t, rows, "nothing of the device projected")
		})
	}
}
