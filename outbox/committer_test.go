package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

var _ startstop.Service = (*outbox.Committer)(nil)

// countingStore is the real store; it counts the transactions run through
// it, holds them until gate is closed when gate is set and, when hide is
// set, hides that key from the first lookup, as if a concurrent writer had
// stored it just after the lookup.
type countingStore struct {
	store.Store
	txs  atomic.Int64
	gate chan struct{}
	hide string
	hid  atomic.Bool
}

func (s *countingStore) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	s.txs.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	return s.Store.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		return fn(ctx, &racingTx{Tx: tx, s: s})
	})
}

// PayloadSize measures payloads as the store does (MongoDB: BSON; others
// by their JSON).
func (s *countingStore) PayloadSize(p json.RawMessage) (int, error) {
	if ps, ok := s.Store.(outbox.PayloadSizer); ok {
		return ps.PayloadSize(p)
	}
	return len(p), nil
}

type racingTx struct {
	outbox.Tx
	s *countingStore
}

func (t *racingTx) LookupKeys(ctx context.Context, keys []string) (map[string]outbox.KeyRecord, error) {
	known, err := t.Tx.LookupKeys(ctx, keys)
	if err == nil && t.s.hide != "" && t.s.hid.CompareAndSwap(false, true) {
		delete(known, t.s.hide)
	}
	return known, err
}

type committerBundle struct {
	st        *countingStore
	writer    *outbox.Writer
	committer *outbox.Committer
	faults    *fault.Set
}

// setupCommitter returns a running Committer over a fresh store of kind
// (SQLite or MongoDB on lungo), stopped at cleanup.
func setupCommitter(t *testing.T, kind string, cfg *outbox.CommitterConfig) *committerBundle {
	t.Helper()
	var st store.Store
	if kind == "MongoDB" {
		st = testkit.NewMongo(t, nil)
	} else {
		st = testkit.NewSQLite(t)
	}
	cs := &countingStore{Store: st}
	f := &fault.Set{}
	wcfg := &outbox.WriterConfig{}
	outbox.SetFaults(wcfg, f)
	w := outbox.NewWriter(cs, wcfg)
	c, err := outbox.NewCommitter(w, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return &committerBundle{st: cs, writer: w, committer: c, faults: f}
}

func (b *committerBundle) prepare(t *testing.T, inputs ...outbox.Input) *outbox.Batch {
	t.Helper()
	batch, err := b.writer.Prepare(inputs)
	require.NoError(t, err)
	return batch
}

// answer is what one Write returned.
type answer struct {
	res []outbox.Result
	err error
}

// queue starts a Write of in and waits until it is queued (or answered),
// so that the requests of a test join their group in the order the test
// queues them.
func (b *committerBundle) queue(ctx context.Context, t *testing.T, in outbox.Input) <-chan answer {
	t.Helper()
	n := outbox.Queued(b.committer)
	batch := b.prepare(t, in)
	out := make(chan answer, 1)
	go func() {
		res, err := b.committer.Write(ctx, batch)
		out <- answer{res, err}
	}()
	// Queued, or answered already: the last request of a group starts it.
	require.Eventually(t, func() bool { return outbox.Queued(b.committer) > n || len(out) > 0 }, 10*time.Second, time.Millisecond)
	return out
}

func await(t *testing.T, c <-chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no answer")
		return answer{}
	}
}

// sized returns an input whose payload holds a string of n bytes.
func sized(device string, n int) outbox.Input {
	in := input(device)
	in.Payload = json.RawMessage(`{"s":"` + strings.Repeat("x", n) + `"}`)
	return in
}

func keyed(key, device string) outbox.Input {
	in := input(device)
	in.IdempotencyKey = key
	return in
}

// oneGroup holds a group until it has n events: only a full group starts.
func oneGroup(n int) *outbox.CommitterConfig {
	return &outbox.CommitterConfig{GroupWait: outbox.GroupWaitMax, GroupMax: n}
}

func TestCommitter(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"SQLite", "MongoDB"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testCommitter(t, kind)
		})
	}
}

func testCommitter(t *testing.T, kind string) {
	ctx := context.Background()

	t.Run("ConcurrentWritesShareTransactions", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, &outbox.CommitterConfig{GroupWait: 20 * time.Millisecond})
		const n = 64
		start := make(chan struct{})
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			batch := b.prepare(t, input(fmt.Sprint("d", i)))
			wg.Go(func() {
				<-start
				res, err := b.committer.Write(ctx, batch)
				answers[i] = answer{res, err}
			})
		}
		close(start)
		wg.Wait()
		ids := map[string]bool{}
		for i, a := range answers {
			require.NoError(t, a.err, "request %d", i)
			require.Len(t, a.res, 1)
			require.False(t, a.res[0].Duplicate)
			ids[a.res[0].ID] = true
		}
		require.Len(t, ids, n, "every request has its own original")
		require.LessOrEqual(t, b.st.txs.Load(), int64(n/4), "transactions for %d requests", n)
		testkit.RequireStored(t, b.st, n)
		entries, err := b.st.Undispatched(ctx, outbox.StreamDefault, store.Partition{}, "", 2*n)
		require.NoError(t, err)
		perEvent := map[string]int{}
		for _, e := range entries {
			perEvent[e.EventID]++
		}
		require.Len(t, perEvent, n)
		for id := range ids {
			require.Equal(t, 1, perEvent[id], "outbox entries of %s", id)
		}
	})

	t.Run("MismatchAndDuplicateDoNotFailOthers", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(4))
		stored, err := b.writer.Write(ctx, []outbox.Input{keyed("k", "d0")})
		require.NoError(t, err)
		txs := b.st.txs.Load()
		other := keyed("k", "d0")
		other.Payload = json.RawMessage(`{"other":true}`)

		first := b.queue(ctx, t, input("d1"))
		dup := b.queue(ctx, t, keyed("k", "d0"))
		mismatch := b.queue(ctx, t, other)
		last := b.queue(ctx, t, input("d2"))

		a := await(t, mismatch)
		var mm *outbox.MismatchError
		require.ErrorAs(t, a.err, &mm)
		require.Equal(t, stored[0].ID, mm.ExistingID)
		require.Equal(t, -1, mm.OtherIndex)
		a = await(t, dup)
		require.NoError(t, a.err)
		require.True(t, a.res[0].Duplicate)
		require.Equal(t, stored[0].ID, a.res[0].ID)
		for _, c := range []<-chan answer{first, last} {
			a := await(t, c)
			require.NoError(t, a.err)
			require.False(t, a.res[0].Duplicate)
			require.Equal(t, "d", testkit.Event(t, b.st, a.res[0].ID).DeviceKey[:1])
		}
		require.Equal(t, txs+1, b.st.txs.Load(), "one transaction for the group")
		testkit.RequireStored(t, b.st, 3)
	})

	t.Run("SameKeyInGroupSameContentIsDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(2))
		first := b.queue(ctx, t, keyed("k", "d1"))
		again := b.queue(ctx, t, keyed("k", "d1"))
		a1, a2 := await(t, first), await(t, again)
		require.NoError(t, a1.err)
		require.NoError(t, a2.err)
		require.False(t, a1.res[0].Duplicate)
		require.True(t, a2.res[0].Duplicate)
		require.Equal(t, a1.res[0].ID, a2.res[0].ID)
		testkit.RequireStored(t, b.st, 1)
	})

	t.Run("SameKeyInGroupOtherContentIsMismatch", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(2))
		other := keyed("k", "d1")
		other.Payload = json.RawMessage(`{"other":true}`)
		first := b.queue(ctx, t, keyed("k", "d1"))
		later := b.queue(ctx, t, other)
		a1, a2 := await(t, first), await(t, later)
		require.NoError(t, a1.err)
		var mm *outbox.MismatchError
		require.ErrorAs(t, a2.err, &mm)
		require.Equal(t, a1.res[0].ID, mm.ExistingID, "the earlier request's original, which is committed")
		require.Nil(t, a2.res)
		testkit.RequireStored(t, b.st, 1)
		require.JSONEq(t, `{"n":3,"t":21.5}`, string(testkit.Event(t, b.st, a1.res[0].ID).Payload))
	})

	t.Run("ConcurrentWriterOutsideGroupRunsItAgain", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(2))
		stored, err := b.writer.Write(ctx, []outbox.Input{keyed("k", "d0")})
		require.NoError(t, err)
		b.st.hide = "k" // the next lookup misses it: the insert meets it
		txs := b.st.txs.Load()
		dup := b.queue(ctx, t, keyed("k", "d0"))
		fresh := b.queue(ctx, t, input("d1"))
		a := await(t, dup)
		require.NoError(t, a.err)
		require.True(t, a.res[0].Duplicate)
		require.Equal(t, stored[0].ID, a.res[0].ID)
		a = await(t, fresh)
		require.NoError(t, a.err)
		require.False(t, a.res[0].Duplicate)
		require.True(t, b.st.hid.Load())
		require.Equal(t, txs+2, b.st.txs.Load(), "the group's transaction ran again")
		testkit.RequireStored(t, b.st, 2)
	})

	t.Run("StoreFailureFailsEveryRequest", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(3))
		b.faults.Arm(outbox.FaultBetweenInserts, -1)
		answers := []<-chan answer{b.queue(ctx, t, input("d1")), b.queue(ctx, t, input("d2")), b.queue(ctx, t, input("d3"))}
		for _, c := range answers {
			a := await(t, c)
			require.ErrorIs(t, a.err, fault.ErrInjected)
			require.Nil(t, a.res)
		}
		testkit.RequireStored(t, b.st, 0)
	})

	t.Run("UnavailableStoreFailsEveryRequest", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(2))
		require.NoError(t, b.st.Close(ctx))
		answers := []<-chan answer{b.queue(ctx, t, input("d1")), b.queue(ctx, t, input("d2"))}
		for _, c := range answers {
			a := await(t, c)
			require.Error(t, a.err)
			require.Nil(t, a.res)
		}
	})

	t.Run("CancelledBeforeItsGroupStartsIsNotWritten", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(2))
		cctx, cancel := context.WithCancel(ctx)
		gone := b.queue(cctx, t, keyed("gone", "d0"))
		cancel()
		a := await(t, gone)
		require.ErrorIs(t, a.err, context.Canceled)
		require.Zero(t, outbox.Queued(b.committer))
		first, second := b.queue(ctx, t, input("d1")), b.queue(ctx, t, input("d2"))
		require.NoError(t, await(t, first).err)
		require.NoError(t, await(t, second).err)
		testkit.RequireStored(t, b.st, 2)
		_, err := b.st.EventByKey(ctx, "gone")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("CancelledAfterItsGroupStartedGetsTheOutcome", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(1))
		b.st.gate = make(chan struct{})
		open := sync.OnceFunc(func() { close(b.st.gate) })
		t.Cleanup(open) // before the committer stops
		cctx, cancel := context.WithCancel(ctx)
		batch := b.prepare(t, input("d1"))
		started := make(chan answer, 1)
		go func() {
			res, err := b.committer.Write(cctx, batch)
			started <- answer{res, err}
		}()
		require.Eventually(t, func() bool { return b.st.txs.Load() == 1 }, 10*time.Second, time.Millisecond, "the group's transaction started")
		cancel()
		open()
		a := await(t, started)
		require.NoError(t, a.err, "an error answer would hide a committed write")
		testkit.Event(t, b.st, a.res[0].ID)
		testkit.RequireStored(t, b.st, 1)
	})

	// A request queued while a group's transaction runs has waited for it:
	// it goes in the next group at once, without waiting GroupWait.
	t.Run("QueuedDuringATransactionDoesNotWait", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, &outbox.CommitterConfig{GroupWait: outbox.GroupWaitMax, GroupMax: 100})
		b.st.gate = make(chan struct{})
		open := sync.OnceFunc(func() { close(b.st.gate) })
		t.Cleanup(open) // before the committer stops
		first := b.queue(ctx, t, input("d1"))
		require.Eventually(t, func() bool { return b.st.txs.Load() == 1 }, 10*time.Second, time.Millisecond, "the first group's transaction started")
		second := b.queue(ctx, t, input("d2"))
		opened := time.Now()
		open()
		require.NoError(t, await(t, first).err)
		require.NoError(t, await(t, second).err)
		require.Less(t, time.Since(opened), outbox.GroupWaitMax/2, "the second request did not wait GroupWait")
		require.Equal(t, int64(2), b.st.txs.Load())
		testkit.RequireStored(t, b.st, 2)
	})

	t.Run("GroupWaitOffIsOneTransactionPerWrite", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, &outbox.CommitterConfig{GroupWait: outbox.GroupWaitOff})
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			batch := b.prepare(t, input(fmt.Sprint("d", i)))
			wg.Go(func() { _, errs[i] = b.committer.Write(ctx, batch) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(n), b.st.txs.Load())
		testkit.RequireStored(t, b.st, n)
		other := input("d0")
		other.Payload = json.RawMessage(`{"other":true}`)
		_, err := b.committer.Write(ctx, b.prepare(t, other))
		require.ErrorIs(t, err, outbox.ErrIdempotencyMismatch)
	})

	// A group takes requests while their bytes (as the store holds them)
	// fit GroupMaxBytes, and a group that reaches it starts at once.
	t.Run("GroupsAreBoundedInBytes", func(t *testing.T) {
		t.Parallel()
		probe := setupCommitter(t, kind, nil)
		size := probe.prepare(t, sized("d0", 1500)).Bytes(0)
		var mu sync.Mutex
		var groups []int
		b := setupCommitter(t, kind, &outbox.CommitterConfig{GroupWait: outbox.GroupWaitMax, GroupMax: 100, GroupMaxBytes: 3*size + size/2,
			ObserveGroup: func(events int) { mu.Lock(); groups = append(groups, events); mu.Unlock() }})
		var answers []<-chan answer
		for i := range 4 {
			answers = append(answers, b.queue(ctx, t, sized(fmt.Sprint("d", i), 1500)))
		}
		queued := time.Now()
		for _, a := range answers {
			require.NoError(t, await(t, a).err)
		}
		require.Less(t, time.Since(queued), outbox.GroupWaitMax/2, "a group that reached its bytes did not wait GroupWait")
		observed := func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(groups) }
		// A group is observed after its requests are answered.
		require.Eventually(t, func() bool { return len(observed()) >= 2 }, 10*time.Second, time.Millisecond)
		require.Equal(t, []int{3, 1}, observed(), "the fourth does not fit the first group's bytes")
		testkit.RequireStored(t, b.st, 4)
	})

	// An event larger than GroupMaxBytes fits no group: it is refused
	// alone, before any transaction, naming its payload; the group it
	// would have joined commits.
	t.Run("OversizedEventIsRefusedAloneBeforeTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, &outbox.CommitterConfig{GroupWait: outbox.GroupWaitMax, GroupMax: 3, GroupMaxBytes: outbox.GroupMaxBytesMin})
		first := b.queue(ctx, t, input("d1"))
		big := sized("big", outbox.GroupMaxBytesMin)
		_, err := b.committer.Write(ctx, b.prepare(t, big))
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "payload", ve.Fields[0].Field)
		require.Contains(t, ve.Fields[0].Reason, "too large")
		require.ErrorIs(t, err, outbox.ErrTooLarge, "refused for its size: HTTP answers 413")
		require.ErrorIs(t, err, outbox.ErrInvalid)
		_, err = b.committer.Write(ctx, b.prepare(t, input("d9"), big))
		require.ErrorAs(t, err, &ve)
		require.Equal(t, outbox.FieldError{Index: 1, Field: "payload", Reason: ve.Fields[0].Reason}, ve.Fields[0], "a batch names the item")
		require.Zero(t, b.st.txs.Load(), "refused before any transaction")
		rest := []<-chan answer{b.queue(ctx, t, input("d2")), b.queue(ctx, t, input("d3"))}
		for _, a := range append(rest, first) {
			require.NoError(t, await(t, a).err)
		}
		require.Equal(t, int64(1), b.st.txs.Load(), "its group ran without it")
		testkit.RequireStored(t, b.st, 3)
	})

	t.Run("StopAnswersQueuedRequests", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, kind, oneGroup(10))
		queued := b.queue(ctx, t, input("d1"))
		require.NoError(t, b.committer.Stop(ctx))
		a := await(t, queued)
		require.NoError(t, a.err)
		testkit.RequireStored(t, b.st, 1)
		_, err := b.committer.Write(ctx, b.prepare(t, input("d2")))
		require.ErrorIs(t, err, outbox.ErrCommitterStopped)
		// A stopped committer starts again.
		require.NoError(t, b.committer.Start(ctx))
		queued = b.queue(ctx, t, input("d2"))
		require.NoError(t, b.committer.Stop(ctx))
		require.NoError(t, await(t, queued).err)
		testkit.RequireStored(t, b.st, 2)
	})
}

func TestCommitterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, "SQLite", nil)
		res, err := b.committer.Write(ctx, b.prepare(t, input("d1")))
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
		testkit.RequireStored(t, b.st, 1)
	})

	t.Run("WriteBeforeStartIsRefused", func(t *testing.T) {
		t.Parallel()
		w := outbox.NewWriter(testkit.NewSQLite(t), nil)
		c, err := outbox.NewCommitter(w, nil)
		require.NoError(t, err)
		batch, err := w.Prepare([]outbox.Input{input("d1")})
		require.NoError(t, err)
		_, err = c.Write(ctx, batch)
		require.ErrorIs(t, err, outbox.ErrCommitterStopped)
	})

	t.Run("InvalidConfigNamesTheField", func(t *testing.T) {
		t.Parallel()
		w := outbox.NewWriter(testkit.NewSQLite(t), nil)
		for field, cfg := range map[string]*outbox.CommitterConfig{
			"GroupWait":     {GroupWait: 2 * outbox.GroupWaitMax},
			"GroupMax":      {GroupMax: -1},
			"GroupMaxBytes": {GroupMaxBytes: outbox.GroupMaxBytesMax + 1},
			"GroupTimeout":  {GroupTimeout: time.Microsecond},
		} {
			_, err := outbox.NewCommitter(w, cfg)
			require.ErrorContains(t, err, field)
		}
		_, err := outbox.NewCommitter(w, &outbox.CommitterConfig{GroupWait: -2})
		require.ErrorContains(t, err, "GroupWait")
	})

	t.Run("StartStopStress", func(t *testing.T) {
		t.Parallel()
		b := setupCommitter(t, "SQLite", nil)
		testkit.StartStopStress(t, 4, 20, func() startstop.Service { return b.committer })
	})

	t.Run("StopsWhenStartContextEnds", func(t *testing.T) {
		t.Parallel()
		w := outbox.NewWriter(testkit.NewSQLite(t), nil)
		c, err := outbox.NewCommitter(w, nil)
		require.NoError(t, err)
		sctx, cancel := context.WithCancel(ctx)
		require.NoError(t, c.Start(sctx))
		cancel()
		select {
		case <-c.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("the committer did not stop")
		}
	})

	t.Run("ObservesGroupSizes", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var sizes []int
		b := setupCommitter(t, "SQLite", &outbox.CommitterConfig{GroupWait: outbox.GroupWaitMax, GroupMax: 3,
			ObserveGroup: func(events int) { mu.Lock(); sizes = append(sizes, events); mu.Unlock() }})
		batch := b.prepare(t, input("d1"), input("d2"))
		done := make(chan answer, 1)
		go func() { res, err := b.committer.Write(ctx, batch); done <- answer{res, err} }()
		require.Eventually(t, func() bool { return outbox.Queued(b.committer) == 1 }, 10*time.Second, time.Millisecond)
		other := b.queue(ctx, t, input("d3"))
		require.NoError(t, await(t, done).err)
		require.NoError(t, await(t, other).err)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{3}, sizes)
	})
}

// TestCommitterLoneRequest: under a light load, where the last group held
// one request and nothing else came within GroupWait, a request goes
// without waiting GroupWait; one that follows another within GroupWait
// waits, and they share a transaction.
func TestCommitterLoneRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const wait = outbox.GroupWaitMax
	b := setupCommitter(t, "SQLite", &outbox.CommitterConfig{GroupWait: wait})
	write := func(device string) time.Duration {
		started := time.Now()
		_, err := b.committer.Write(ctx, b.prepare(t, input(device)))
		require.NoError(t, err)
		return time.Since(started)
	}
	first := time.Now()
	require.GreaterOrEqual(t, write("d1"), wait, "the first request waits: nothing is known yet")
	// Nothing more within GroupWait of the first request.
	require.Eventually(t, func() bool { return time.Since(first) > 2*wait }, 3*wait, 10*time.Millisecond)
	txs := b.st.txs.Load()
	require.Less(t, write("d2"), wait, "a lone request after a lone group goes at once")
	require.Equal(t, txs+1, b.st.txs.Load())

	// Two requests close together: the second follows the first within
	// GroupWait, so it waits for company, and a third joins it.
	second := b.queue(ctx, t, input("d3"))
	third := b.queue(ctx, t, input("d4"))
	for _, c := range []<-chan answer{second, third} {
		require.NoError(t, await(t, c).err)
	}
	require.Equal(t, txs+2, b.st.txs.Load(), "one transaction for the two")
	testkit.RequireStored(t, b.st, 4)
}
