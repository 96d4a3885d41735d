package dispatcher

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

// recordedWrite is one call of a marks' write.
type recordedWrite struct {
	ids     []string
	pos     store.Position
	batches int
}

// writeRecorder is a marks' write that records its calls; while gate is
// set, each call waits for a value from it, which is the call's error.
type writeRecorder struct {
	mu     sync.Mutex
	writes []recordedWrite
	gate   chan error
}

func (w *writeRecorder) write(_ context.Context, ids []string, pos store.Position, batches int) error {
	w.mu.Lock()
	w.writes = append(w.writes, recordedWrite{ids: slices.Clone(ids), pos: pos, batches: batches})
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		return <-gate
	}
	return nil
}

func (w *writeRecorder) calls() []recordedWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// batchIDs returns n ids named after batch b.
func batchIDs(b, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(b*1000 + i)
	}
	return ids
}

// outcomes collects the done calls of the batches handed over.
type outcomes struct {
	mu   sync.Mutex
	errs map[int]error
}

func (o *outcomes) done(b int) func(error) {
	return func(err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.errs == nil {
			o.errs = map[int]error{}
		}
		o.errs[b] = err
	}
}

func (o *outcomes) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.errs)
}

func TestMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pos := func(s string) store.Position { return store.Position(s) }

	t.Run("BatchesAddedDuringAWriteShareTheNext", func(t *testing.T) {
		t.Parallel()
		w := &writeRecorder{gate: make(chan error)}
		m := newMarks(w.write, time.Millisecond, 100)
		var o outcomes
		require.NoError(t, m.start(ctx, batchIDs(0, 3), pos("p0"), o.done(0)))
		require.Eventually(t, func() bool { return len(w.calls()) == 1 }, 10*time.Second, time.Millisecond)
		// The first write is in flight: these wait for it, merged.
		require.NoError(t, m.start(ctx, batchIDs(1, 2), pos("p1"), o.done(1)))
		require.NoError(t, m.start(ctx, batchIDs(2, 2), nil, o.done(2))) // a catch-up page keeps the position
		require.NoError(t, m.start(ctx, batchIDs(3, 1), pos("p3"), o.done(3)))
		require.NoError(t, m.start(ctx, batchIDs(4, 1), nil, o.done(4)))
		w.gate <- nil
		require.Eventually(t, func() bool { return len(w.calls()) == 2 }, 10*time.Second, time.Millisecond)
		w.gate <- nil
		require.NoError(t, m.wait())

		calls := w.calls()
		require.Len(t, calls, 2)
		require.Equal(t, recordedWrite{ids: batchIDs(0, 3), pos: pos("p0"), batches: 1}, calls[0])
		want := slices.Concat(batchIDs(1, 2), batchIDs(2, 2), batchIDs(3, 1), batchIDs(4, 1))
		require.Equal(t, recordedWrite{ids: want, pos: pos("p3"), batches: 4}, calls[1],
			"the ids in the order of their batches, the last position any of them had")
		require.Equal(t, 5, o.count(), "every batch learns its write's outcome")
	})

	t.Run("LessThanABatchWaitsForTheInterval", func(t *testing.T) {
		t.Parallel()
		w := &writeRecorder{}
		m := newMarks(w.write, time.Hour, 100)
		var o outcomes
		require.NoError(t, m.start(ctx, batchIDs(0, 1), pos("p0"), o.done(0)))
		require.Eventually(t, func() bool { return len(w.calls()) == 1 }, 10*time.Second, time.Millisecond,
			"the first write after a quiet interval goes at once")
		require.NoError(t, m.start(ctx, batchIDs(1, 1), pos("p1"), o.done(1)))
		require.NoError(t, m.start(ctx, batchIDs(2, 1), pos("p2"), o.done(2)))
		testkit.Never(t, func() bool { return len(w.calls()) > 1 }, 200*time.Millisecond, 5*time.Millisecond,
			"two entries wait for the interval")
		// A full batch does not wait.
		require.NoError(t, m.start(ctx, batchIDs(3, 98), pos("p3"), o.done(3)))
		require.Eventually(t, func() bool { return len(w.calls()) == 2 }, 10*time.Second, time.Millisecond)
		require.Equal(t, 3, w.calls()[1].batches)
		// wait writes what is queued at once.
		require.NoError(t, m.start(ctx, batchIDs(4, 1), pos("p4"), o.done(4)))
		require.NoError(t, m.wait())
		calls := w.calls()
		require.Len(t, calls, 3)
		require.Equal(t, recordedWrite{ids: batchIDs(4, 1), pos: pos("p4"), batches: 1}, calls[2])
	})

	t.Run("AFailedWriteStopsThePipeline", func(t *testing.T) {
		t.Parallel()
		w := &writeRecorder{gate: make(chan error)}
		m := newMarks(w.write, time.Millisecond, 100)
		var o outcomes
		require.NoError(t, m.start(ctx, batchIDs(0, 1), pos("p0"), o.done(0)))
		require.Eventually(t, func() bool { return len(w.calls()) == 1 }, 10*time.Second, time.Millisecond)
		require.NoError(t, m.start(ctx, batchIDs(1, 1), pos("p1"), o.done(1)))
		boom := errors.New("boom")
		w.gate <- boom
		// The batch queued behind the failed write is never written, and
		// its outcome is the failure.
		require.Eventually(t, func() bool { return o.count() == 2 }, 10*time.Second, time.Millisecond)
		err := m.start(ctx, batchIDs(2, 1), pos("p2"), o.done(2))
		require.ErrorIs(t, err, boom, "the next hand-over returns the failure")
		require.Len(t, w.calls(), 1, "nothing is written after a failed write")
		o.mu.Lock()
		require.ErrorIs(t, o.errs[0], boom)
		require.ErrorIs(t, o.errs[1], boom)
		require.ErrorIs(t, o.errs[2], boom)
		o.mu.Unlock()
		require.NoError(t, m.wait(), "the failure was returned once")
	})

	t.Run("AWaitReturnsTheFailure", func(t *testing.T) {
		t.Parallel()
		w := &writeRecorder{gate: make(chan error, 1)}
		m := newMarks(w.write, time.Millisecond, 100)
		var o outcomes
		boom := errors.New("boom")
		w.gate <- boom
		require.NoError(t, m.start(ctx, batchIDs(0, 1), pos("p0"), o.done(0)))
		require.ErrorIs(t, m.wait(), boom)
	})

	t.Run("AHandOverBeyondTheMergeBoundWaits", func(t *testing.T) {
		t.Parallel()
		w := &writeRecorder{gate: make(chan error)}
		m := newMarks(w.write, time.Millisecond, 10)
		m.maxMerged = 20
		var o outcomes
		require.NoError(t, m.start(ctx, batchIDs(0, 10), pos("p0"), o.done(0)))
		require.Eventually(t, func() bool { return len(w.calls()) == 1 }, 10*time.Second, time.Millisecond)
		require.NoError(t, m.start(ctx, batchIDs(1, 10), pos("p1"), o.done(1)))
		require.NoError(t, m.start(ctx, batchIDs(2, 10), pos("p2"), o.done(2)))
		handed := make(chan error, 1)
		go func() { handed <- m.start(ctx, batchIDs(3, 10), pos("p3"), o.done(3)) }()
		testkit.Never(t, func() bool { return len(handed) > 0 }, 100*time.Millisecond, 5*time.Millisecond,
			"20 ids are queued: the third batch waits for the write in flight")
		w.gate <- nil // the first write ends; the second takes batches 1 and 2
		require.NoError(t, <-handed)
		w.gate <- nil
		w.gate <- nil
		require.NoError(t, m.wait())
		calls := w.calls()
		require.Len(t, calls, 3)
		require.Equal(t, slices.Concat(batchIDs(1, 10), batchIDs(2, 10)), calls[1].ids)
		require.Equal(t, batchIDs(3, 10), calls[2].ids)
	})
}
