// Package storetest is the conformance suite of the storage port: the
// meanings of store.Store that the components rely on, checked against a
// real store. Every store runs it (river's riverdrivertest is the model):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Open: func(t testing.TB, o storetest.Options) store.Store { … }})
//	}
//
// Each check gets a fresh, migrated store from Harness.Open.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Options ask Harness.Open for a store with particular traits.
type Options struct {
	// ShortHistory asks for a store that keeps little feed history, so a
	// check can make a saved position fall out of it (MongoDB: a small
	// oplog). Stores whose history is bounded by DeleteDispatched alone
	// may ignore it.
	ShortHistory bool
}

// Harness opens stores for the suite.
type Harness struct {
	// Open returns a fresh, migrated store that no other check uses; it
	// closes it at t's cleanup.
	Open func(t testing.TB, o Options) store.Store
	// NoShortHistory says the store cannot be made to forget feed history
	// in a test (a real replica set's oplog): the check that needs it
	// skips.
	NoShortHistory bool
}

// Check is one conformance check.
type Check struct {
	Name string
	Run  func(t testing.TB, h Harness)
}

// Run runs every check as a parallel subtest of t.
func Run(t *testing.T, h Harness) {
	for _, c := range Checks() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, h)
		})
	}
}

// Checks returns the suite's checks, so a test can run one alone (for
// example against a store broken on purpose, to see the suite fail).
func Checks() []Check {
	return append([]Check{
		{"WriteAndRead", checkWriteAndRead},
		{"SameKeySameContentReturnsFirstID", checkSameKeySameContent},
		{"SameKeyOtherContentIsMismatch", checkSameKeyOtherContent},
		{"ConcurrentWritersOfOneKeyYieldOneOriginal", checkConcurrentSameKey},
		{"DuplicateKeyInsertIsErrDuplicateKey", checkDuplicateKeyInsert},
		{"TakenEventIDIsErrDuplicateKey", checkTakenEventID},
		{"FailureBetweenWritesLeavesNeither", checkFailureBetweenWrites},
		{"PayloadReadsBackAsWritten", checkPayloadAsWritten},
		{"FeedDeliversInCommitOrder", checkFeedOrder},
		{"LoadEventsAfterTheFeedsPositions", checkLoadAfterFeed},
		{"FeedResumesAfterReopen", checkFeedResume},
		{"FeedDeliversOnlyItsStream", checkFeedStream},
		{"PositionLostThenCatchUpMissesNothing", checkPositionLost},
		{"UndispatchedInOrderWithPaging", checkUndispatched},
		{"LeaseIsExclusiveAndFenced", checkLeaseExclusive},
		{"MarkDispatchedOnlyByLeaseHolder", checkMarkDispatchedFenced},
		{"MarkRelayedMarksAndCheckpointsTogether", checkMarkRelayed},
		{"ReleaseLetsAnotherTakeOver", checkRelease},
		{"PauseIsRecordedUntilResumed", checkPause},
		{"CheckpointKeepsReplacesAndForgets", checkCheckpoint},
		{"MarkSyncedOnce", checkMarkSynced},
		{"ParkLeavesSyncedAlone", checkPark},
		{"CandidatesOldestFirstWithinLimit", checkCandidatesOrder},
		{"CandidatesOnlyOldUnsyncedUnparkedUnclaimed", checkCandidatesFilter},
		{"ClaimIsConditional", checkClaimConditional},
		{"ClaimManyTakesTheCandidatesInOrder", checkClaimMany},
		{"ConcurrentClaimsOneWinner", checkConcurrentClaims},
		{"RollbackOnlyWithItsOwnStamp", checkRollback},
		{"RollbackManyRestoresEachOwnStamp", checkRollbackMany},
		{"CountsByState", checkCounts},
		{"DeleteDispatchedKeepsUndispatched", checkDeleteDispatched},
		{"DeleteSyncedOldestFirstKeepsTheUnfinished", checkDeleteSynced},
		{"DeleteSyncedByTypeAndSource", checkDeleteSyncedScoped},
		{"OutboxEntriesOfOneOriginal", checkOutboxEntries},
		{"TraceParentReadsBackWithOriginalAndEntry", checkTraceParent},
		{"ClientKeysApartAndClientReadsBack", checkClient},
		{"ListEventsByOccurredWindowInOrderWithPaging", checkListByOccurred},
		{"ListEventsByCreatedWindow", checkListByCreated},
		{"ListEventsSameTimePagesByID", checkListSameTime},
		{"ListEventsByEntityAndState", checkListByEntityAndState},
		{"ListEventsByDeviceRange", checkListByDeviceRange},
		{"ListEventsRejectsInvalidQueries", checkListInvalid},
		{"RedriveOnlyParked", checkRedrive},
		{"MigrateTwiceAndCheckSchema", checkMigrate},
		{"ClosedStoreIsUnavailable", checkClosed},
	}, append(partitionChecks(), markChecks()...)...)
}

// t0 is the fake clock's start in checks that need one.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// clock is a fake clock for the writer.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one check's store, stream and writer.
type bundle struct {
	t      testing.TB
	s      store.Store
	stream string
	clock  *clock
	w      *outbox.Writer
	seq    int
}

func setup(t testing.TB, h Harness, o Options) *bundle {
	s := h.Open(t, o)
	c := &clock{now: t0}
	stream := name("stream")
	return &bundle{t: t, s: s, stream: stream, clock: c, w: outbox.NewWriter(s, &outbox.WriterConfig{Stream: stream, Now: c.Now})}
}

func (b *bundle) input(device string) outbox.Input {
	return outbox.Input{SourceKey: "src", DeviceKey: device, OccurredAt: "2026-10-31T10:00:00.123Z", Payload: json.RawMessage(`{"t":21.5,"n":3,"tags":["a","b"]}`)}
}

// write stores n new events and returns their ids in write order.
func (b *bundle) write(n int) []string {
	b.t.Helper()
	inputs := make([]outbox.Input, n)
	for i := range inputs {
		b.seq++
		inputs[i] = b.input(fmt.Sprintf("d%05d", b.seq))
	}
	res, err := b.w.Write(context.Background(), inputs)
	require.NoError(b.t, err)
	ids := make([]string, n)
	for i, r := range res {
		require.False(b.t, r.Duplicate)
		ids[i] = r.ID
	}
	return ids
}

func (b *bundle) event(id string) *outbox.Event {
	b.t.Helper()
	got, err := b.s.LoadEvents(context.Background(), []string{id})
	require.NoError(b.t, err)
	l, ok := got[id]
	require.True(b.t, ok, "event %s not found", id)
	require.NoError(b.t, l.Err)
	return l.Event
}

// claim claims id alone (Claim of one id) and returns its before-image,
// or nil when it was not a candidate.
func (b *bundle) claim(id string, at, claimedBefore time.Time) *outbox.Event {
	b.t.Helper()
	c, err := b.s.Claim(context.Background(), []string{id}, at, claimedBefore)
	require.NoError(b.t, err)
	require.Empty(b.t, c.Unreadable)
	if len(c.Events) == 0 {
		return nil
	}
	require.Len(b.t, c.Events, 1)
	require.Equal(b.t, id, c.Events[0].ID)
	return c.Events[0]
}

func (b *bundle) undispatched() []outbox.Entry {
	b.t.Helper()
	var all []outbox.Entry
	after := ""
	for {
		page, err := b.s.Undispatched(context.Background(), b.stream, store.Partition{}, after, 100)
		require.NoError(b.t, err)
		all = append(all, page...)
		if len(page) < 100 {
			return all
		}
		after = page[len(page)-1].ID
	}
}

func eventIDs(entries []outbox.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.EventID
	}
	return out
}

func (b *bundle) lease(owner string, now time.Time) store.Lease {
	b.t.Helper()
	l, err := b.s.AcquireLease(context.Background(), b.stream, owner, now, time.Minute)
	require.NoError(b.t, err)
	return l
}

// drain reads the feed until it has want entries or the deadline passes.
// feedFromNow opens the feed of the bundle's stream from now, closed at
// t's cleanup.
func (b *bundle) feedFromNow(t testing.TB) store.Feed {
	t.Helper()
	f, err := b.s.OpenFeed(context.Background(), b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

func drain(t testing.TB, f store.Feed, want int) []outbox.Entry {
	t.Helper()
	var got []outbox.Entry
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		batch, err := f.Next(context.Background(), 100, 200*time.Millisecond)
		require.NoError(t, err)
		got = append(got, batch...)
	}
	return got
}

func checkWriteAndRead(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(1)
	ev := b.event(ids[0])
	require.Equal(t, ids[0], ev.ID)
	require.Equal(t, "src", ev.SourceKey)
	require.Equal(t, "d00001", ev.DeviceKey)
	require.Equal(t, outbox.TypeDefault, ev.Type)
	require.True(t, time.Date(2026, 10, 31, 10, 0, 0, 123e6, time.UTC).Equal(ev.OccurredAt), "occurredAt %s", ev.OccurredAt)
	require.True(t, t0.Equal(ev.CreatedAt), "createdAt %s", ev.CreatedAt)
	require.JSONEq(t, `{"t":21.5,"n":3,"tags":["a","b"]}`, string(ev.Payload))
	require.NotEmpty(t, ev.ContentHash)
	require.Nil(t, ev.SyncedAt)
	require.Nil(t, ev.SyncFailure)
	require.Nil(t, ev.LastRequeuedAt)
	require.Equal(t, outbox.StatePending, ev.State())

	byKey, err := b.s.EventByKey(ctx, ev.IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, ev.ID, byKey.ID)
	_, err = b.s.EventByKey(ctx, "no-such-key")
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err := b.s.LoadEvents(ctx, []string{outbox.NewEventID()})
	require.NoError(t, err)
	require.Empty(t, got, "an unknown id is absent")

	entries := b.undispatched()
	require.Len(t, entries, 1)
	require.Equal(t, ids[0], entries[0].EventID)
	require.Equal(t, b.stream, entries[0].Stream)
	require.Nil(t, entries[0].DispatchedAt)
	msg, err := outbox.DecodeMessage(map[string]any{outbox.PayloadField: entries[0].Message})
	require.NoError(t, err)
	require.Equal(t, ids[0], msg.EventID)
	require.Equal(t, outbox.OriginOutbox, msg.Origin)
}

func checkSameKeySameContent(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	in := b.input("d1")
	in.IdempotencyKey = "k1"
	first, err := b.w.Write(ctx, []outbox.Input{in})
	require.NoError(t, err)
	again, err := b.w.Write(ctx, []outbox.Input{in})
	require.NoError(t, err)
	require.Equal(t, first[0].ID, again[0].ID)
	require.True(t, again[0].Duplicate)
	require.Len(t, b.undispatched(), 1)
}

func checkSameKeyOtherContent(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	in := b.input("d1")
	in.IdempotencyKey = "k1"
	first, err := b.w.Write(ctx, []outbox.Input{in})
	require.NoError(t, err)
	in.Payload = json.RawMessage(`{"t":99}`)
	_, err = b.w.Write(ctx, []outbox.Input{b.input("d2"), in})
	var mm *outbox.MismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, first[0].ID, mm.ExistingID)
	require.Equal(t, 1, mm.Index)
	require.JSONEq(t, `{"t":21.5,"n":3,"tags":["a","b"]}`, string(b.event(first[0].ID).Payload), "the original is untouched")
	require.Len(t, b.undispatched(), 1, "nothing of the failed batch was written")
}

func checkConcurrentSameKey(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	const n = 50
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.w.Write(context.Background(), []outbox.Input{b.input("same")})
			errs[i] = err
			if err == nil {
				ids[i] = res[0].ID
			}
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Len(t, b.undispatched(), 1)
	c, err := b.s.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Pending)
}

func checkDuplicateKeyInsert(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	events := b.records(t, "d1")
	require.NoError(t, b.insertEvents(events))
	again := b.records(t, "d1") // same key, new id
	require.ErrorIs(t, b.insertEvents(again), outbox.ErrDuplicateKey)
	known, err := lookup(b.s, events[0].IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, events[0].ID, known.ID)
	require.Equal(t, events[0].ContentHash, known.ContentHash)
}

// checkTakenEventID: an original whose id is taken (two ids drawn in one
// slot of outbox.NewEventID collided) fails with ErrDuplicateKey, which the
// writer answers by running the transaction again with new ids; the stored
// original is untouched.
func checkTakenEventID(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	events := b.records(t, "d1")
	require.NoError(t, b.insertEvents(events))
	other := b.records(t, "d2") // another key, the same id
	other[0].ID = events[0].ID
	require.ErrorIs(t, b.insertEvents(other), outbox.ErrDuplicateKey)
	stored, err := b.s.EventByKey(ctx, events[0].IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, events[0].ID, stored.ID)
	_, err = b.s.EventByKey(ctx, other[0].IdempotencyKey)
	require.ErrorIs(t, err, store.ErrNotFound, "the colliding original is not stored")
}

// records returns the original of one input of device, as the writer
// would insert it (a new id each call).
func (b *bundle) records(t testing.TB, device string) []outbox.Event {
	events, _, err := b.w.Records([]outbox.Input{b.input(device)})
	require.NoError(t, err)
	return events
}

// insertEvents inserts events in a write transaction of their own.
func (b *bundle) insertEvents(events []outbox.Event) error {
	return b.s.WriteTx(context.Background(), func(ctx context.Context, tx outbox.Tx) error {
		return tx.InsertEvents(ctx, events)
	})
}

func lookup(s store.Store, key string) (outbox.KeyRecord, error) {
	var rec outbox.KeyRecord
	err := s.WriteTx(context.Background(), func(ctx context.Context, tx outbox.Tx) error {
		got, err := tx.LookupKeys(ctx, []string{key, "absent"})
		if err != nil {
			return err
		}
		if len(got) != 1 {
			return fmt.Errorf("LookupKeys returned %d records for one stored key", len(got))
		}
		rec = got[key]
		return nil
	})
	return rec, err
}

// checkPayloadAsWritten: a payload reads back as it was written, its
// members in their order (not sorted, not in a map's order), nested ones
// too, and its integers, the largest 64-bit ones included, as integers.
func checkPayloadAsWritten(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	events, entries, err := b.w.Records([]outbox.Input{b.input("d1")})
	require.NoError(t, err)
	const payload = `{"z":1,"a":{"y":[{"k":2,"c":-9223372036854775808}],"b":true},"m":null,"x":"s","n":9223372036854775807,"f":21.5}`
	events[0].Payload = json.RawMessage(payload)
	require.NoError(t, b.s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return tx.InsertEntries(ctx, entries)
	}))
	require.Equal(t, payload, string(b.event(events[0].ID).Payload))
}

func checkFailureBetweenWrites(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	events, entries, err := b.w.Records([]outbox.Input{b.input("d1"), b.input("d2")})
	require.NoError(t, err)
	boom := errors.New("crash between the two writes")
	err = b.s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	got, err := b.s.LoadEvents(ctx, []string{events[0].ID, events[1].ID})
	require.NoError(t, err)
	require.Empty(t, got, "the originals were rolled back")
	require.Empty(t, b.undispatched())

	// The same records then commit as a whole.
	require.NoError(t, b.s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return tx.InsertEntries(ctx, entries)
	}))
	got, err = b.s.LoadEvents(ctx, []string{events[0].ID, events[1].ID})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Len(t, b.undispatched(), 2)
}

func checkFeedOrder(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	f, err := b.s.OpenFeed(context.Background(), b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(context.Background())
	var want []string
	for range 5 {
		want = append(want, b.write(3)...)
	}
	got := drain(t, f, len(want))
	require.Equal(t, want, eventIDs(got))
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].ID, got[i].ID, "entry ids sort in feed order")
	}
	require.NotNil(t, f.Position())
}

// checkLoadAfterFeed: the originals of the entries a feed delivered read
// back with the feed's read-after positions (outbox.Entry.ReadAfter) on
// the context, and with positions the store cannot read (another store's,
// a garbled one), which it ignores.
func checkLoadAfterFeed(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	f := b.feedFromNow(t)
	want := b.write(3)
	positions := []string{"", "not-a-position", "9.9.9"}
	for _, e := range drain(t, f, len(want)) {
		positions = append(positions, e.ReadAfter)
	}
	got, err := b.s.LoadEvents(store.WithReadAfter(context.Background(), positions...), want)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for _, id := range want {
		require.Contains(t, got, id)
		require.NoError(t, got[id].Err)
	}
}

func checkFeedResume(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	opts := store.FeedOptions{PollInterval: 10 * time.Millisecond}
	f, err := b.s.OpenFeed(ctx, b.stream, nil, opts)
	require.NoError(t, err)
	first := b.write(4)
	require.Equal(t, first, eventIDs(drain(t, f, 4)))
	pos := f.Position()
	require.NotNil(t, pos)
	require.NoError(t, f.Close(ctx))

	later := b.write(3)
	f2, err := b.s.OpenFeed(ctx, b.stream, pos, opts)
	require.NoError(t, err)
	defer f2.Close(ctx)
	require.Equal(t, later, eventIDs(drain(t, f2, 3)), "a reopened feed resumes after its position")
	extra, err := f2.Next(ctx, 100, 50*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, extra)
}

func checkFeedStream(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	f, err := b.s.OpenFeed(ctx, b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(ctx)
	other := outbox.NewWriter(b.s, &outbox.WriterConfig{Stream: name("other"), Now: b.clock.Now})
	_, err = other.Write(ctx, []outbox.Input{b.input("x1"), b.input("x2")})
	require.NoError(t, err)
	mine := b.write(2)
	got := drain(t, f, 2)
	require.Equal(t, mine, eventIDs(got))
	for _, e := range got {
		require.Equal(t, b.stream, e.Stream)
	}
}

// checkPositionLost saves a position, makes the store forget the history
// after it (entries relayed and removed by retention, and, where the
// history is bounded otherwise, more writes until it is: lungo trims its
// oplog only past a whole second), and expects the position to be reported
// lost at open or at the first Next; the undispatched entries are all still
// there for the catch-up.
func checkPositionLost(t testing.TB, h Harness) {
	if h.NoShortHistory {
		t.Skip("skipped: this store's feed history cannot be rolled over in a test")
	}
	b := setup(t, h, Options{ShortHistory: true})
	ctx := context.Background()
	opts := store.FeedOptions{PollInterval: 10 * time.Millisecond}
	f, err := b.s.OpenFeed(ctx, b.stream, nil, opts)
	require.NoError(t, err)
	b.write(2)
	require.Len(t, drain(t, f, 2), 2)
	pos := f.Position()
	require.NoError(t, f.Close(ctx))

	l := b.lease("owner", time.Now())
	lost := func() error {
		f, err := b.s.OpenFeed(ctx, b.stream, pos, opts)
		if err != nil {
			return err
		}
		defer f.Close(ctx)
		_, err = f.Next(ctx, 100, 50*time.Millisecond)
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.write(50)
		var ids []string
		for _, e := range b.undispatched() {
			ids = append(ids, e.ID)
		}
		require.NoError(t, b.s.MarkDispatched(ctx, l, ids, time.Now().Add(-2*time.Hour)))
		_, err = b.s.DeleteDispatched(ctx, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		err := lost()
		if errors.Is(err, store.ErrPositionLost) {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the position never counted as lost")
	}
	pending := b.write(3) // not dispatched: the catch-up must find them
	require.ErrorIs(t, lost(), store.ErrPositionLost, "a lost position stays lost")
	require.Equal(t, pending, eventIDs(b.undispatched()), "the catch-up finds every undispatched entry")
}

func checkUndispatched(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(7)
	all := b.undispatched()
	require.Equal(t, ids, eventIDs(all))
	l := b.lease("owner", time.Now())
	require.NoError(t, b.s.MarkDispatched(ctx, l, []string{all[1].ID, all[4].ID}, time.Now()))
	left := b.undispatched()
	require.Equal(t, []string{ids[0], ids[2], ids[3], ids[5], ids[6]}, eventIDs(left))
	page, err := b.s.Undispatched(ctx, b.stream, store.Partition{}, left[1].ID, 2)
	require.NoError(t, err)
	require.Equal(t, []string{ids[3], ids[5]}, eventIDs(page), "paging continues after the given id")
	other, err := b.s.Undispatched(ctx, name("other"), store.Partition{}, "", 10)
	require.NoError(t, err)
	require.Empty(t, other)
}

func checkLeaseExclusive(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	now := time.Now().UTC()
	a := b.lease("a", now)
	require.True(t, a.Held())
	require.Equal(t, int64(1), a.Term)
	bl := b.lease("b", now)
	require.False(t, bl.Held(), "another owner holds it")
	a2 := b.lease("a", now.Add(time.Second))
	require.True(t, a2.Held(), "the holder takes it again")
	require.Greater(t, a2.Term, a.Term)
	_, err := b.s.RenewLease(ctx, a, now, time.Minute)
	require.ErrorIs(t, err, store.ErrFenced, "the old term is fenced")
	a2, err = b.s.RenewLease(ctx, a2, now.Add(2*time.Second), time.Minute)
	require.NoError(t, err)

	later := now.Add(2 * time.Hour) // past a2's expiry
	bl = b.lease("b", later)
	require.True(t, bl.Held(), "an expired lease is taken over")
	require.Greater(t, bl.Term, a2.Term)
	_, err = b.s.RenewLease(ctx, a2, later, time.Minute)
	require.ErrorIs(t, err, store.ErrFenced)
	require.ErrorIs(t, b.s.SaveCheckpoint(ctx, a2, store.Checkpoint{At: later}), store.ErrFenced)
	require.NoError(t, b.s.SaveCheckpoint(ctx, bl, store.Checkpoint{At: later}))
	st, err := b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, "b", st.Owner)
	require.Equal(t, bl.Term, st.Term)
	none, err := b.s.ReadLease(ctx, name("never"))
	require.NoError(t, err)
	require.Nil(t, none)
}

func checkMarkDispatchedFenced(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	b.write(2)
	entries := b.undispatched()
	now := time.Now().UTC()
	old := b.lease("a", now)
	newer := b.lease("b", now.Add(2*time.Hour))
	require.True(t, newer.Held())
	err := b.s.MarkDispatched(ctx, old, []string{entries[0].ID}, now)
	require.ErrorIs(t, err, store.ErrFenced)
	require.Len(t, b.undispatched(), 2, "a fenced mark changes nothing")
	require.NoError(t, b.s.MarkDispatched(ctx, newer, []string{entries[0].ID}, now))
	require.Len(t, b.undispatched(), 1)
	require.NoError(t, b.s.MarkDispatched(ctx, newer, []string{entries[0].ID}, now.Add(time.Minute)), "marking again is harmless")
}

// checkMarkRelayed: MarkRelayed marks the batch dispatched at the
// checkpoint's time and records the checkpoint, both or neither: a fenced
// holder changes neither.
func checkMarkRelayed(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	f, err := b.s.OpenFeed(ctx, b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(ctx)
	ids := b.write(3)
	entries := drain(t, f, 3)
	require.Len(t, entries, 3)
	pos := f.Position()
	require.NotNil(t, pos)
	entryIDs := make([]string, len(entries))
	for i, e := range entries {
		entryIDs[i] = e.ID
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	old := b.lease("a", now)
	newer := b.lease("b", now.Add(2*time.Hour))
	require.True(t, newer.Held())
	err = b.s.MarkRelayed(ctx, old, entryIDs[:2], store.Checkpoint{Position: pos, At: now})
	require.ErrorIs(t, err, store.ErrFenced)
	require.Len(t, b.undispatched(), 3, "a fenced holder marks nothing")
	st, err := b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Nil(t, st.Position, "a fenced holder writes no checkpoint")
	require.Nil(t, st.CheckpointAt)

	require.NoError(t, b.s.MarkRelayed(ctx, newer, entryIDs[:2], store.Checkpoint{Position: pos, At: now}))
	require.Equal(t, ids[2:], eventIDs(b.undispatched()))
	got, err := b.s.OutboxEntries(ctx, ids[0])
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].DispatchedAt)
	require.True(t, now.Equal(*got[0].DispatchedAt), "dispatchedAt is the checkpoint's time: %v", got[0].DispatchedAt)
	st, err = b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, []byte(pos), []byte(st.Position))
	require.NotNil(t, st.CheckpointAt)
	require.True(t, now.Equal(*st.CheckpointAt))

	// No position keeps the saved one (the catch-up's batches); marking
	// again keeps the first dispatchedAt.
	later := now.Add(time.Second)
	require.NoError(t, b.s.MarkRelayed(ctx, newer, entryIDs, store.Checkpoint{At: later}))
	require.Empty(t, b.undispatched())
	got, err = b.s.OutboxEntries(ctx, ids[0])
	require.NoError(t, err)
	require.True(t, now.Equal(*got[0].DispatchedAt), "marking again is harmless")
	st, err = b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, []byte(pos), []byte(st.Position), "no position keeps the saved one")
	require.True(t, later.Equal(*st.CheckpointAt))

	// An empty batch still checkpoints, under the lease only.
	require.NoError(t, b.s.MarkRelayed(ctx, newer, nil, store.Checkpoint{Forget: true, At: later}))
	st, err = b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Nil(t, st.Position, "forget clears it")
	require.ErrorIs(t, b.s.MarkRelayed(ctx, old, nil, store.Checkpoint{At: later}), store.ErrFenced)
}

func checkRelease(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	now := time.Now().UTC()
	a := b.lease("a", now)
	ok, err := b.s.ReleaseLease(ctx, a)
	require.NoError(t, err)
	require.True(t, ok)
	bl := b.lease("b", now.Add(time.Millisecond))
	require.True(t, bl.Held(), "a released lease is free at once")
	ok, err = b.s.ReleaseLease(ctx, a)
	require.NoError(t, err)
	require.False(t, ok, "a stale holder cannot release the new one")
	st, err := b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, "b", st.Owner)
}

// checkPause: a pause (store.Pause, over the lease operations) is seen by
// another reader of the store until it is resumed, once; a second pause
// keeps the first's operator and time; stages are apart.
func checkPause(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	relay1 := store.Stage{Kind: store.StageRelay, Partition: 1}
	all := store.Stage{Kind: store.StageRelay, Partition: store.StageAllPartitions}
	p, err := store.Paused(ctx, b.s, b.stream, relay1, now)
	require.NoError(t, err)
	require.Nil(t, p, "a stage never paused runs")
	p, created, err := store.Pause(ctx, b.s, b.stream, relay1, "alice", now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "relay:1", p.Stage)
	p, created, err = store.Pause(ctx, b.s, b.stream, relay1, "bob", now.Add(time.Second))
	require.NoError(t, err)
	require.False(t, created, "a paused stage stays paused as it was")
	require.Equal(t, "alice", p.By)
	later := now.Add(24 * time.Hour)
	p, err = store.Paused(ctx, b.s, b.stream, relay1, later)
	require.NoError(t, err)
	require.NotNil(t, p, "a pause lasts until resumed")
	require.Equal(t, "alice", p.By)
	require.True(t, p.Since.Equal(now), "since %s, want %s", p.Since, now)
	other, err := store.Paused(ctx, b.s, b.stream, all, later)
	require.NoError(t, err)
	require.Nil(t, other, "pausing one partition leaves the others")
	ok, err := store.Resume(ctx, b.s, b.stream, relay1, later)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.Resume(ctx, b.s, b.stream, relay1, later)
	require.NoError(t, err)
	require.False(t, ok, "a resumed stage is not paused")
	p, err = store.Paused(ctx, b.s, b.stream, relay1, later)
	require.NoError(t, err)
	require.Nil(t, p)
	p, created, err = store.Pause(ctx, b.s, b.stream, relay1, "bob", later)
	require.NoError(t, err)
	require.True(t, created, "a resumed stage can be paused again")
	require.Equal(t, "bob", p.By)
}

func checkCheckpoint(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	f, err := b.s.OpenFeed(ctx, b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(ctx)
	b.write(1)
	drain(t, f, 1)
	pos := f.Position()
	require.NotNil(t, pos)

	now := time.Now().UTC().Truncate(time.Millisecond)
	l := b.lease("a", now)
	require.NoError(t, b.s.SaveCheckpoint(ctx, l, store.Checkpoint{Position: pos, At: now}))
	st, err := b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, []byte(pos), []byte(st.Position))
	require.False(t, st.PositionInvalid)
	require.NotNil(t, st.CheckpointAt)
	require.True(t, now.Equal(*st.CheckpointAt))

	later := now.Add(time.Second)
	require.NoError(t, b.s.SaveCheckpoint(ctx, l, store.Checkpoint{At: later}))
	st, err = b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, []byte(pos), []byte(st.Position), "no position keeps the saved one")
	require.True(t, later.Equal(*st.CheckpointAt))

	require.NoError(t, b.s.SaveCheckpoint(ctx, l, store.Checkpoint{Forget: true, At: later}))
	st, err = b.s.ReadLease(ctx, b.stream)
	require.NoError(t, err)
	require.Nil(t, st.Position, "forget clears it")

	// The saved position opens a feed.
	f2, err := b.s.OpenFeed(ctx, b.stream, pos, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, f2.Close(ctx))
}

func checkMarkSynced(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(3)
	at := t0.Add(time.Minute)
	n, err := b.s.MarkSynced(ctx, ids[:2], at)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = b.s.MarkSynced(ctx, ids[:2], at.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "already synced")
	ev := b.event(ids[0])
	require.NotNil(t, ev.SyncedAt)
	require.True(t, at.Equal(*ev.SyncedAt), "syncedAt keeps its first value")
	require.Equal(t, outbox.StateSynced, ev.State())
	require.Nil(t, b.event(ids[2]).SyncedAt)

	// A parked original synced by a replay loses its syncFailure.
	ok, err := b.s.Park(ctx, ids[2], outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "x", Message: "m", At: at, Deliveries: 3})
	require.NoError(t, err)
	require.True(t, ok)
	n, err = b.s.MarkSynced(ctx, ids[2:], at)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Nil(t, b.event(ids[2]).SyncFailure)
}

func checkPark(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(2)
	at := t0.Add(time.Minute)
	f := outbox.SyncFailure{Category: outbox.CategoryNonRetryable, Code: "invalid_original", Message: "free text", At: at, Deliveries: 1}
	ok, err := b.s.Park(ctx, ids[0], f)
	require.NoError(t, err)
	require.True(t, ok)
	ev := b.event(ids[0])
	require.NotNil(t, ev.SyncFailure)
	require.Equal(t, f.Category, ev.SyncFailure.Category)
	require.Equal(t, f.Code, ev.SyncFailure.Code)
	require.Equal(t, f.Message, ev.SyncFailure.Message)
	require.Equal(t, f.Deliveries, ev.SyncFailure.Deliveries)
	require.True(t, at.Equal(ev.SyncFailure.At))
	require.Equal(t, outbox.StateFailed, ev.State())

	_, err = b.s.MarkSynced(ctx, ids[1:], at)
	require.NoError(t, err)
	ok, err = b.s.Park(ctx, ids[1], f)
	require.NoError(t, err)
	require.False(t, ok, "a synced original is not parked")
	require.Nil(t, b.event(ids[1]).SyncFailure)
}

func checkCandidatesOrder(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	var ids []string
	for range 5 {
		ids = append(ids, b.write(1)...)
		b.clock.Advance(time.Second)
	}
	now := b.clock.Now().Add(time.Hour)
	q := store.CandidateQuery{CreatedBefore: now, ClaimedBefore: now, Limit: 3}
	got, err := b.s.Candidates(ctx, q)
	require.NoError(t, err)
	require.Equal(t, ids[:3], got)
	q.Limit = 10
	got, err = b.s.Candidates(ctx, q)
	require.NoError(t, err)
	require.Equal(t, ids, got)
}

func checkCandidatesFilter(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	old := b.write(5) // created at t0
	b.clock.Advance(10 * time.Minute)
	young := b.write(1) // created at t0+10m
	now := t0.Add(20 * time.Minute)
	_, err := b.s.MarkSynced(ctx, old[:1], now)
	require.NoError(t, err)
	_, err = b.s.Park(ctx, old[1], outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "c", At: now})
	require.NoError(t, err)
	recent := now.Add(-time.Minute)
	require.NotNil(t, b.claim(old[2], recent, recent.Add(-time.Hour)))
	long := now.Add(-2 * time.Hour)
	require.NotNil(t, b.claim(old[3], long, long.Add(-time.Hour)))

	got, err := b.s.Candidates(ctx, store.CandidateQuery{
		CreatedBefore: now.Add(-15 * time.Minute), // old ones only
		ClaimedBefore: now.Add(-30 * time.Minute), // claims older than 30m are void
		Limit:         100,
	})
	require.NoError(t, err)
	sort.Strings(got)
	want := []string{old[3], old[4]}
	sort.Strings(want)
	require.Equal(t, want, got, "synced, parked, recently claimed and young (%s) are not candidates", young[0])
}

func checkClaimConditional(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(1)
	at := t0.Add(time.Hour)
	before := b.claim(ids[0], at, at.Add(-30*time.Minute))
	require.NotNil(t, before)
	require.Nil(t, before.LastRequeuedAt, "the claim returns the original as it was")
	require.Equal(t, int64(0), before.RequeueCount)
	require.Equal(t, "src", before.SourceKey)
	ev := b.event(ids[0])
	require.True(t, at.Equal(*ev.LastRequeuedAt))
	require.Equal(t, int64(1), ev.RequeueCount)

	require.Nil(t, b.claim(ids[0], at.Add(time.Minute), at.Add(-29*time.Minute)), "claimed recently")
	again := at.Add(31 * time.Minute)
	before = b.claim(ids[0], again, again.Add(-30*time.Minute))
	require.NotNil(t, before, "a claim older than requeue-after is void")
	require.True(t, at.Equal(*before.LastRequeuedAt))
	require.Equal(t, int64(2), b.event(ids[0]).RequeueCount)

	_, err := b.s.MarkSynced(ctx, ids, again)
	require.NoError(t, err)
	later := again.Add(time.Hour)
	require.Nil(t, b.claim(ids[0], later, later.Add(-time.Minute)), "synced originals are never claimed")
	require.Nil(t, b.claim(outbox.NewEventID(), later, later))
	require.Nil(t, b.claim("not an id", later, later))
}

func checkClaimMany(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(6)
	at := t0.Add(time.Hour)
	_, err := b.s.MarkSynced(ctx, ids[1:2], at)
	require.NoError(t, err)
	_, err = b.s.Park(ctx, ids[2], outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "c", At: at})
	require.NoError(t, err)
	recent := at.Add(-time.Minute)
	require.NotNil(t, b.claim(ids[3], recent, recent))
	long := at.Add(-2 * time.Hour)
	require.NotNil(t, b.claim(ids[5], long, long))

	// Asked in an order of its own, with an unknown id and one that is
	// not an id among them.
	ask := []string{ids[5], outbox.NewEventID(), ids[4], ids[3], "not an id", ids[2], ids[1], ids[0]}
	c, err := b.s.Claim(ctx, ask, at, at.Add(-30*time.Minute))
	require.NoError(t, err)
	require.Empty(t, c.Unreadable)
	got := make([]string, len(c.Events))
	for i, ev := range c.Events {
		got[i] = ev.ID
		require.NotContains(t, string(ev.Payload), "21.5", "without payloads")
	}
	require.Equal(t, []string{ids[5], ids[4], ids[0]}, got, "the candidates among ids, in the order asked")
	requireAt(t, long, c.Events[0].LastRequeuedAt, "before-images")
	require.Equal(t, int64(1), c.Events[0].RequeueCount)
	require.Nil(t, c.Events[1].LastRequeuedAt)

	for i, id := range ids {
		ev := b.event(id)
		switch i {
		case 0, 4, 5:
			requireAt(t, at, ev.LastRequeuedAt, "claimed %d", i)
		case 3:
			requireAt(t, recent, ev.LastRequeuedAt, "a recent claim is left alone")
		default:
			require.Nil(t, ev.LastRequeuedAt, "synced or parked: not claimed (%d)", i)
		}
	}
	require.Equal(t, int64(2), b.event(ids[5]).RequeueCount)

	c, err = b.s.Claim(ctx, nil, at, at)
	require.NoError(t, err)
	require.Empty(t, c.Events)
}

// requireAt fails t unless at is set and equals want.
func requireAt(t testing.TB, want time.Time, at *time.Time, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, at, msgAndArgs...)
	require.True(t, want.Equal(*at), "want %s, got %s", want, *at)
}

func checkConcurrentClaims(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ids := b.write(5)
	const n = 10
	var wg sync.WaitGroup
	results := make([]store.Claimed, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := t0.Add(time.Hour + time.Duration(i)*time.Millisecond)
			ask := slices.Clone(ids)
			if i%2 == 1 {
				slices.Reverse(ask)
			}
			results[i], errs[i] = b.s.Claim(context.Background(), ask, at, at.Add(-30*time.Minute))
		}()
	}
	wg.Wait()
	won := map[string]int{}
	for i := range n {
		require.NoError(t, errs[i])
		for _, ev := range results[i].Events {
			won[ev.ID]++
		}
	}
	for _, id := range ids {
		require.Equal(t, 1, won[id], "claimed by exactly one of the concurrent claims: %s", id)
		require.Equal(t, int64(1), b.event(id).RequeueCount)
	}
}

func checkRollback(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(1)
	first := t0.Add(time.Hour)
	firstImage := b.claim(ids[0], first, first.Add(-30*time.Minute))
	require.NotNil(t, firstImage)
	second := first.Add(time.Hour)
	before := b.claim(ids[0], second, second.Add(-30*time.Minute))
	require.NotNil(t, before)

	n, err := b.s.RollbackClaims(ctx, first, []*outbox.Event{firstImage})
	require.NoError(t, err)
	require.Zero(t, n, "a newer claim is left alone")
	ev := b.event(ids[0])
	requireAt(t, second, ev.LastRequeuedAt)
	require.Equal(t, int64(2), ev.RequeueCount)

	n, err = b.s.RollbackClaims(ctx, second, []*outbox.Event{before})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ev = b.event(ids[0])
	requireAt(t, first, ev.LastRequeuedAt, "the previous stamp is restored")
	require.Equal(t, int64(1), ev.RequeueCount)

	n, err = b.s.RollbackClaims(ctx, first, []*outbox.Event{firstImage})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ev = b.event(ids[0])
	require.Nil(t, ev.LastRequeuedAt)
	require.Equal(t, int64(0), ev.RequeueCount)
}

func checkRollbackMany(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(3)
	long := t0.Add(-time.Hour)
	require.NotNil(t, b.claim(ids[0], long, long))
	at := t0.Add(time.Hour)
	c, err := b.s.Claim(ctx, ids, at, at.Add(-30*time.Minute))
	require.NoError(t, err)
	require.Len(t, c.Events, 3)
	// Another run claims ids[2] anew: its claim survives this run's
	// rollback.
	newer := at.Add(time.Hour)
	require.NotNil(t, b.claim(ids[2], newer, newer.Add(-30*time.Minute)))

	n, err := b.s.RollbackClaims(ctx, at, c.Events)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ev := b.event(ids[0])
	requireAt(t, long, ev.LastRequeuedAt, "each original gets back its own stamp")
	require.Equal(t, int64(1), ev.RequeueCount)
	ev = b.event(ids[1])
	require.Nil(t, ev.LastRequeuedAt)
	require.Zero(t, ev.RequeueCount)
	ev = b.event(ids[2])
	requireAt(t, newer, ev.LastRequeuedAt)
	require.Equal(t, int64(2), ev.RequeueCount)

	n, err = b.s.RollbackClaims(ctx, at, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

func checkCounts(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(3)
	b.clock.Advance(time.Minute)
	ids = append(ids, b.write(3)...)
	at := t0.Add(time.Hour)
	_, err := b.s.MarkSynced(ctx, ids[:2], at)
	require.NoError(t, err)
	_, err = b.s.Park(ctx, ids[2], outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "c", At: at})
	require.NoError(t, err)
	_, err = b.s.Park(ctx, ids[3], outbox.SyncFailure{Category: outbox.CategoryNonRetryable, Code: "c", At: at})
	require.NoError(t, err)
	entries := b.undispatched()
	l := b.lease("a", time.Now())
	require.NoError(t, b.s.MarkDispatched(ctx, l, []string{entries[0].ID, entries[1].ID, entries[2].ID}, at))

	c, err := b.s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), c.Total)
	require.Equal(t, int64(2), c.Synced)
	require.Equal(t, int64(2), c.Failed)
	require.Equal(t, int64(2), c.Pending)
	require.Equal(t, map[string]int64{outbox.CategoryPoison: 1, outbox.CategoryNonRetryable: 1}, c.FailedByCategory)
	require.Equal(t, int64(3), c.Undispatched)
	require.NotNil(t, c.OldestPending)
	require.True(t, t0.Add(time.Minute).Equal(*c.OldestPending), "the oldest pending is one of the later ones: %s", c.OldestPending)
}

func checkDeleteDispatched(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	b.write(4)
	entries := b.undispatched()
	l := b.lease("a", time.Now())
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, b.s.MarkDispatched(ctx, l, []string{entries[0].ID, entries[1].ID}, old))
	require.NoError(t, b.s.MarkDispatched(ctx, l, []string{entries[2].ID}, time.Now()))
	n, err := b.s.DeleteDispatched(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "only entries dispatched before the cut")
	left := b.undispatched()
	require.Len(t, left, 1)
	require.Equal(t, entries[3].ID, left[0].ID)
}

// checkDeleteSynced: the retention of originals removes synced originals
// created before the cut, oldest first and at most the limit per call;
// never a pending one, nor one whose outbox entry is undispatched. The
// counts follow, the key goes with the original (the same key writes a new
// one), and a limit below 1 is an error that removes nothing.
func checkDeleteSynced(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	var ids []string
	for range 6 { // an hour apart: ids[i] created at t0 + i hours
		ids = append(ids, b.write(1)...)
		b.clock.Advance(time.Hour)
	}
	entries := b.undispatched()
	var relayed []string
	for _, e := range entries {
		if e.EventID != ids[3] {
			relayed = append(relayed, e.ID)
		}
	}
	require.NoError(t, b.s.MarkDispatched(ctx, b.lease("a", time.Now()), relayed, time.Now()))
	// ids[3] synced (by the reconciler, say) while its entry waits; ids[4]
	// pending; ids[5] synced but newer than the cut.
	n, err := b.s.MarkSynced(ctx, []string{ids[0], ids[1], ids[2], ids[3], ids[5]}, time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	key0 := b.event(ids[0]).IdempotencyKey
	cut := t0.Add(5 * time.Hour) // after ids[4], before ids[5]

	_, err = b.s.DeleteSynced(ctx, cut, store.SyncedScope{}, 0)
	require.Error(t, err, "a limit below 1")
	n, err = b.s.DeleteSynced(ctx, cut, store.SyncedScope{}, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "at most the limit")
	got, err := b.s.LoadEvents(ctx, ids)
	require.NoError(t, err)
	require.NotContains(t, got, ids[0], "the oldest first")
	require.Contains(t, got, ids[1])

	n, err = b.s.DeleteSynced(ctx, cut, store.SyncedScope{}, 100)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	got, err = b.s.LoadEvents(ctx, ids)
	require.NoError(t, err)
	for i, id := range ids {
		_, kept := got[id]
		require.Equal(t, i >= 3, kept, "ids[%d]: synced before the cut goes; undispatched, pending and newer stay", i)
	}
	n, err = b.s.DeleteSynced(ctx, cut, store.SyncedScope{}, 100)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more")

	c, err := b.s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 2, 1}, []int64{c.Total, c.Synced, c.Pending}, "counts after the retention")
	_, err = b.s.EventByKey(ctx, key0)
	require.ErrorIs(t, err, store.ErrNotFound, "the key went with its original")
	res, err := b.w.Write(ctx, []outbox.Input{b.input("d00001")}) // ids[0]'s fields: its derived key
	require.NoError(t, err)
	require.Equal(t, key0, res[0].IdempotencyKey)
	require.False(t, res[0].Duplicate, "the same key again is a new original")
	c, err = b.s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Total)
}

func checkOutboxEntries(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(3)
	entries := b.undispatched()
	require.Equal(t, ids, eventIDs(entries))

	got, err := b.s.OutboxEntries(ctx, ids[1])
	require.NoError(t, err)
	require.Len(t, got, 1, "one entry per original")
	require.Equal(t, entries[1].ID, got[0].ID)
	require.Equal(t, ids[1], got[0].EventID)
	require.Equal(t, b.stream, got[0].Stream)
	require.Equal(t, t0, got[0].CreatedAt)
	require.Nil(t, got[0].DispatchedAt, "not relayed yet")
	require.NotEmpty(t, got[0].Message)

	at := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond).UTC()
	require.NoError(t, b.s.MarkDispatched(ctx, b.lease("a", time.Now()), []string{entries[1].ID}, at))
	got, err = b.s.OutboxEntries(ctx, ids[1])
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].DispatchedAt)
	require.Equal(t, at, got[0].DispatchedAt.UTC(), "dispatched when")

	for _, id := range []string{outbox.NewEventID(), "not-an-id", ""} {
		got, err = b.s.OutboxEntries(ctx, id)
		require.NoError(t, err)
		require.Empty(t, got, "no original %q", id)
	}
	_, err = b.s.DeleteDispatched(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	got, err = b.s.OutboxEntries(ctx, ids[1])
	require.NoError(t, err)
	require.Empty(t, got, "removed after retention")
	got, err = b.s.OutboxEntries(ctx, ids[2])
	require.NoError(t, err)
	require.Len(t, got, 1, "the others stay")
}

// checkTraceParent: the trace context of an ingest request is stored with
// the original and its outbox entry and reads back from every read of
// them; an event written without one reads back without.
func checkTraceParent(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	events, entries, err := b.w.Records([]outbox.Input{b.input("traced"), b.input("untraced")})
	require.NoError(t, err)
	events[0].TraceParent, entries[0].TraceParent = tp, tp
	feed, err := b.s.OpenFeed(ctx, b.stream, nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer feed.Close(ctx)
	require.NoError(t, b.s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return tx.InsertEntries(ctx, entries)
	}))
	traced, untraced := events[0].ID, events[1].ID

	byID := func(entries []outbox.Entry) map[string]string {
		out := map[string]string{}
		for _, e := range entries {
			out[e.EventID] = e.TraceParent
		}
		return out
	}
	want := map[string]string{traced: tp, untraced: ""}
	require.Equal(t, want, byID(drain(t, feed, 2)), "the feed")
	require.Equal(t, want, byID(b.undispatched()), "Undispatched")
	got, err := b.s.OutboxEntries(ctx, traced)
	require.NoError(t, err)
	require.Equal(t, map[string]string{traced: tp}, byID(got), "OutboxEntries")

	require.Equal(t, tp, b.event(traced).TraceParent, "LoadEvents")
	require.Empty(t, b.event(untraced).TraceParent)
	ev, err := b.s.EventByKey(ctx, events[0].IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, tp, ev.TraceParent, "EventByKey")
	listed, err := b.s.ListEvents(ctx, store.EventQuery{By: store.ByCreated, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	for _, ev := range listed {
		require.Equal(t, want[ev.ID], ev.TraceParent, "ListEvents %s", ev.ID)
	}
	b.clock.Advance(time.Hour)
	claimed := b.claim(traced, b.clock.Now(), b.clock.Now())
	require.NotNil(t, claimed)
	require.Equal(t, tp, claimed.TraceParent, "Claim")
}

// checkClient: two named clients and the default one write the same key
// (given and derived): three originals, each with its client (none for the
// default one), read back by every read; each client's retry is its own
// original's duplicate.
func checkClient(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	var inputs []outbox.Input
	for _, client := range []string{"acme", "globex", ""} {
		given, derived := b.input("shared"), b.input("derived")
		given.IdempotencyKey, given.Client, derived.Client = "k-1", client, client
		inputs = append(inputs, given, derived)
	}
	res, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	ids := map[string]bool{}
	for i, r := range res {
		require.False(t, r.Duplicate, "input %d", i)
		ids[r.ID] = true
		ev := b.event(r.ID)
		require.Equal(t, inputs[i].Client, ev.Client, "LoadEvents %d", i)
		require.Equal(t, outbox.ClientKey(inputs[i].Client, r.IdempotencyKey), ev.IdempotencyKey, "the key stored")
		byKey, err := b.s.EventByKey(ctx, ev.IdempotencyKey)
		require.NoError(t, err)
		require.Equal(t, r.ID, byKey.ID, "EventByKey %d", i)
		require.Equal(t, inputs[i].Client, byKey.Client, "EventByKey %d", i)
	}
	require.Len(t, ids, 6, "every client its own originals")
	require.Equal(t, "k-1", res[0].IdempotencyKey, "the result names the client's key")
	again, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	for i, r := range again {
		require.True(t, r.Duplicate, "retry %d", i)
		require.Equal(t, res[i].ID, r.ID, "retry %d", i)
	}
	listed, err := b.s.ListEvents(ctx, store.EventQuery{By: store.ByCreated, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 6)
	clients := map[string]int{}
	for _, ev := range listed {
		clients[ev.Client]++
	}
	require.Equal(t, map[string]int{"acme": 2, "globex": 2, "": 2}, clients, "ListEvents")
}

func checkMigrate(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	require.NoError(t, b.s.CheckSchema(ctx))
	ids := b.write(1)
	require.NoError(t, b.s.Migrate(ctx, nil))
	require.NoError(t, b.s.Migrate(ctx, &store.MigrateConfig{OutboxRetention: time.Hour}))
	require.NoError(t, b.s.CheckSchema(ctx))
	require.Equal(t, ids[0], b.event(ids[0]).ID, "migrating again keeps the data")
	require.NoError(t, b.s.Ping(ctx))
	require.NotEmpty(t, b.s.Kind())
}

func checkClosed(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	require.NoError(t, b.s.Close(ctx))
	err := b.s.Ping(ctx)
	require.Error(t, err)
	require.True(t, store.IsUnavailable(err), "a closed store is unavailable: %v", err)
	_, err = b.w.Write(ctx, []outbox.Input{b.input("d1")})
	require.True(t, store.IsUnavailable(err), "a write to a closed store is unavailable: %v", err)
}

// checkDeleteSyncedScoped: DeleteSynced removes only what its scope
// selects: the originals of one type, of one source, or all but those of
// some types and sources (each kept for a retention of its own); the rest
// stays.
func checkDeleteSyncedScoped(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	type original struct{ typ, source string }
	originals := []original{{"reading", "a"}, {"audit", "a"}, {"reading", "b"}, {"audit", "b"}, {"alarm", "c"}, {"reading", "c"}}
	ids := make([]string, len(originals))
	for i, o := range originals {
		res, err := b.w.Write(ctx, []outbox.Input{{SourceKey: o.source, DeviceKey: fmt.Sprintf("d%d", i), Type: o.typ,
			OccurredAt: "2026-10-31T10:00:00Z"}})
		require.NoError(t, err)
		ids[i] = res[0].ID
		b.clock.Advance(time.Minute)
	}
	b.write(1) // the newest, which a store may keep
	entries := b.undispatched()
	relayed := make([]string, len(entries))
	for i, e := range entries {
		relayed[i] = e.ID
	}
	require.NoError(t, b.s.MarkDispatched(ctx, b.lease("a", time.Now()), relayed, time.Now()))
	_, err := b.s.MarkSynced(ctx, ids, time.Now())
	require.NoError(t, err)
	cut := b.clock.Now()
	left := func() []string {
		got, err := b.s.LoadEvents(ctx, ids)
		require.NoError(t, err)
		var out []string
		for i, id := range ids {
			if _, ok := got[id]; ok {
				out = append(out, fmt.Sprintf("%s/%s", originals[i].typ, originals[i].source))
			}
		}
		return out
	}
	deleteSynced := func(scope store.SyncedScope) int64 {
		n, err := b.s.DeleteSynced(ctx, cut, scope, 100)
		require.NoError(t, err)
		return n
	}

	require.Equal(t, int64(2), deleteSynced(store.SyncedScope{Type: "audit"}))
	require.Equal(t, []string{"reading/a", "reading/b", "alarm/c", "reading/c"}, left(), "only the type's")
	require.Equal(t, int64(1), deleteSynced(store.SyncedScope{Source: "b", ExceptTypes: []string{"audit"}}))
	require.Equal(t, []string{"reading/a", "alarm/c", "reading/c"}, left(), "only the source's, not of the types left out")
	require.Equal(t, int64(1), deleteSynced(store.SyncedScope{ExceptTypes: []string{"alarm", "x"}, ExceptSources: []string{"c"}}))
	require.Equal(t, []string{"alarm/c", "reading/c"}, left(), "all but the types and sources left out")
	require.Equal(t, int64(1), deleteSynced(store.SyncedScope{Type: "reading", Source: "c"}))
	require.Equal(t, []string{"alarm/c"}, left(), "the type's of the source")
	require.True(t, store.SyncedScope{Type: "alarm", Source: "c"}.Matches("alarm", "c"))
	require.False(t, store.SyncedScope{ExceptSources: []string{"c"}}.Matches("alarm", "c"))
}

// writeAt stores one original of source/device that occurred at occurred,
// created at the bundle clock's time, and returns its id.
func (b *bundle) writeAt(source, device string, occurred time.Time) string {
	b.t.Helper()
	res, err := b.w.Write(context.Background(), []outbox.Input{{SourceKey: source, DeviceKey: device,
		OccurredAt: occurred.UTC().Format(time.RFC3339Nano)}})
	require.NoError(b.t, err)
	return res[0].ID
}

// listAll pages through q with page size limit and returns the ids.
func (b *bundle) listAll(q store.EventQuery, limit int) []string {
	b.t.Helper()
	var ids []string
	q.Limit = limit
	for range 1000 {
		page, err := b.s.ListEvents(context.Background(), q)
		require.NoError(b.t, err)
		for _, ev := range page {
			require.Nil(b.t, ev.Payload, "listings carry no payload")
			ids = append(ids, ev.ID)
		}
		if len(page) < limit {
			return ids
		}
		q.After = q.CursorOf(page[len(page)-1])
	}
	b.t.Fatal("the listing never ended")
	return nil
}

func (b *bundle) count(q store.EventQuery) int64 {
	b.t.Helper()
	n, err := b.s.CountEvents(context.Background(), q)
	require.NoError(b.t, err)
	return n
}

func checkListByOccurred(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	base := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	// Written out of occurrence order: the listing orders by occurredAt.
	order := []int{5, 0, 3, 7, 1, 6, 2, 4}
	byHour := make([]string, len(order))
	for _, h := range order {
		byHour[h] = b.writeAt("src", "dev", base.Add(time.Duration(h)*time.Hour))
	}
	from, to := base.Add(time.Hour), base.Add(6*time.Hour) // hours 1..5
	q := store.EventQuery{From: from, To: to}
	for _, limit := range []int{1, 2, 3, 100} {
		require.Equal(t, byHour[1:6], b.listAll(q, limit), "page size %d", limit)
	}
	require.Equal(t, int64(5), b.count(q))
	require.Equal(t, byHour, b.listAll(store.EventQuery{By: store.ByOccurred}, 3), "an open window lists everything")
	require.Equal(t, byHour[:2], b.listAll(store.EventQuery{To: base.Add(2 * time.Hour)}, 10), "To is exclusive")
	require.Equal(t, byHour[6:], b.listAll(store.EventQuery{From: base.Add(6 * time.Hour)}, 10), "From is inclusive")
	require.Equal(t, int64(8), b.count(store.EventQuery{}))

	// The page after the last one is empty; a cursor past the window too.
	page, err := b.s.ListEvents(context.Background(), store.EventQuery{From: from, To: to, Limit: 10,
		After: &store.EventCursor{At: to, ID: byHour[5]}})
	require.NoError(t, err)
	require.Empty(t, page)
}

func checkListByCreated(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	occurred := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 6 {
		// Occurrence order is the reverse of ingest order.
		ids = append(ids, b.writeAt("src", "dev", occurred.Add(-time.Duration(i)*time.Minute)))
		b.clock.Advance(time.Minute)
	}
	q := store.EventQuery{By: store.ByCreated, From: t0.Add(time.Minute), To: t0.Add(4 * time.Minute)}
	require.Equal(t, ids[1:4], b.listAll(q, 2))
	require.Equal(t, int64(3), b.count(q))
	page, err := b.s.ListEvents(context.Background(), store.EventQuery{By: store.ByCreated, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.True(t, t0.Equal(page[0].CreatedAt))
	require.Equal(t, "src", page[0].SourceKey, "listed originals carry their fields")
	require.NotEmpty(t, page[0].IdempotencyKey)
}

func checkListSameTime(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	at := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 7 {
		ids = append(ids, b.writeAt("src", fmt.Sprintf("d%d", i), at))
	}
	sort.Strings(ids)
	q := store.EventQuery{From: at, To: at.Add(time.Millisecond)}
	require.Equal(t, ids, b.listAll(q, 2), "originals of one instant page by id")
	q.By = store.ByCreated
	q.From, q.To = t0, t0.Add(time.Millisecond)
	require.Equal(t, ids, b.listAll(q, 3))
}

func checkListByEntityAndState(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	at := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var a1, a2, c1 []string
	for i := range 4 {
		when := at.Add(time.Duration(i) * time.Minute)
		a1 = append(a1, b.writeAt("a", "d1", when))
		a2 = append(a2, b.writeAt("a", "d2", when))
		c1 = append(c1, b.writeAt("c", "d1", when))
	}
	window := store.EventQuery{From: at, To: at.Add(time.Hour)}
	q := window
	q.SourceKey, q.DeviceKey = "a", "d1"
	require.Equal(t, a1, b.listAll(q, 3), "one device of one source")
	q.DeviceKey = ""
	got := b.listAll(q, 3)
	require.ElementsMatch(t, append(append([]string{}, a1...), a2...), got, "one source")
	require.Equal(t, int64(8), b.count(q))
	q.By, q.From, q.To = store.ByCreated, t0, t0.Add(time.Second)
	q.DeviceKey = "d1"
	// Written at one clock reading: same createdAt, so in id order (ids
	// are random after their second).
	require.Equal(t, slices.Sorted(slices.Values(a1)), b.listAll(q, 10), "one device, by createdAt")

	at2 := t0.Add(time.Hour)
	_, err := b.s.MarkSynced(ctx, []string{a1[0], a2[0]}, at2)
	require.NoError(t, err)
	_, err = b.s.Park(ctx, a1[1], outbox.SyncFailure{Category: outbox.CategoryPoison, Code: "c", At: at2, Deliveries: 3})
	require.NoError(t, err)
	for state, want := range map[string][]string{
		outbox.StateSynced:  {a1[0]},
		outbox.StateFailed:  {a1[1]},
		outbox.StatePending: a1[2:],
		store.StateAny:      a1,
		"":                  a1,
	} {
		q := window
		q.SourceKey, q.DeviceKey, q.State = "a", "d1", state
		require.Equal(t, want, b.listAll(q, 2), "state %q", state)
		require.Equal(t, int64(len(want)), b.count(q), "state %q", state)
	}
	q = window
	q.State = outbox.StateSynced
	require.ElementsMatch(t, []string{a1[0], a2[0]}, b.listAll(q, 1))
	q.SourceKey = "c"
	require.Empty(t, b.listAll(q, 1))
	_ = c1
}

// checkListByDeviceRange: DeviceFrom and DeviceTo select the devices of
// one source between them, both bounds included, in byte order.
func checkListByDeviceRange(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	at := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	ids := map[string][]string{}
	for i := range 2 {
		when := at.Add(time.Duration(i) * time.Minute)
		for _, e := range []string{"a/d0", "a/d1", "a/d10", "a/d2", "a/d3", "a/D2", "a/d1x", "b/d2", "ab/d2"} {
			source, device, _ := strings.Cut(e, "/")
			ids[e] = append(ids[e], b.writeAt(source, device, when))
		}
	}
	of := func(entities ...string) []string {
		var out []string
		for _, e := range entities {
			out = append(out, ids[e]...)
		}
		return out
	}
	window := store.EventQuery{From: at, To: at.Add(time.Hour), SourceKey: "a"}
	for _, tc := range []struct {
		from, to string
		want     []string
	}{
		// Byte order: "d1" < "d10" < "d1x" < "d2"; upper case sorts first.
		{"d1", "d2", of("a/d1", "a/d10", "a/d1x", "a/d2")},
		{"d1", "d1", of("a/d1")},
		{"d10", "d1x", of("a/d10", "a/d1x")},
		{"D", "d0", of("a/D2", "a/d0")},
		{"d4", "d9", nil},
	} {
		q := window
		q.DeviceFrom, q.DeviceTo = tc.from, tc.to
		require.ElementsMatch(t, tc.want, b.listAll(q, 3), "%s..%s", tc.from, tc.to)
		require.Equal(t, int64(len(tc.want)), b.count(q), "%s..%s", tc.from, tc.to)
		q.By, q.From, q.To = store.ByCreated, t0, t0.Add(time.Second)
		require.ElementsMatch(t, tc.want, b.listAll(q, 2), "%s..%s by createdAt", tc.from, tc.to)
	}
	// In (time, id) order, across devices, as every listing.
	q := window
	q.DeviceFrom, q.DeviceTo = "d2", "d3"
	got := b.listAll(q, 1)
	require.ElementsMatch(t, of("a/d2", "a/d3"), got)
	require.ElementsMatch(t, []string{ids["a/d2"][0], ids["a/d3"][0]}, got[:2], "the first minute first")
	// With a state.
	_, err := b.s.MarkSynced(context.Background(), []string{ids["a/d2"][0]}, t0.Add(time.Hour))
	require.NoError(t, err)
	q.State = outbox.StateSynced
	require.Equal(t, ids["a/d2"][:1], b.listAll(q, 2))
	require.Equal(t, int64(1), b.count(q))
}

func checkListInvalid(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	at := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	for field, q := range map[string]store.EventQuery{
		"By":        {By: "updated", Limit: 1},
		"State":     {State: "lost", Limit: 1},
		"From":      {From: at, To: at, Limit: 1},
		"DeviceKey": {DeviceKey: "d1", Limit: 1},
		"Limit":     {Limit: 0},
		// A range of devices: within its source, both bounds, in order,
		// not with one device.
		"DeviceFrom":     {DeviceFrom: "d1", DeviceTo: "d2", Limit: 1},
		"DeviceFrom/":    {SourceKey: "s", DeviceTo: "d2", Limit: 1},
		"DeviceTo":       {SourceKey: "s", DeviceFrom: "d2", DeviceTo: "d1", Limit: 1},
		"DeviceKey: one": {SourceKey: "s", DeviceKey: "d1", DeviceFrom: "d1", DeviceTo: "d2", Limit: 1},
	} {
		_, err := b.s.ListEvents(ctx, q)
		require.ErrorContains(t, err, field)
		if field != "Limit" {
			_, err = b.s.CountEvents(ctx, q)
			require.ErrorContains(t, err, field)
		}
	}
}

func checkRedrive(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	ids := b.write(4)
	at := t0.Add(time.Hour)
	for _, id := range ids[:2] {
		require.NotNil(t, b.claim(id, at, at))
		ok, err := b.s.Park(ctx, id, outbox.SyncFailure{Category: store.CategoryRequeueExhausted, Code: "c", At: at})
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, err := b.s.MarkSynced(ctx, ids[2:3], at)
	require.NoError(t, err)
	require.NotNil(t, b.claim(ids[3], at, at))
	c, err := b.s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{store.CategoryRequeueExhausted: 2}, c.FailedByCategory, "the reconciler's category is counted apart")

	n, err := b.s.Redrive(ctx, append(ids, outbox.NewEventID()))
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "only the parked originals")
	for _, id := range ids[:2] {
		ev := b.event(id)
		require.Equal(t, outbox.StatePending, ev.State())
		require.Nil(t, ev.SyncFailure)
		require.Nil(t, ev.LastRequeuedAt, "a fresh requeue budget")
		require.Zero(t, ev.RequeueCount)
	}
	require.Equal(t, outbox.StateSynced, b.event(ids[2]).State())
	pending := b.event(ids[3])
	require.Equal(t, int64(1), pending.RequeueCount, "a pending original keeps its requeues")
	require.NotNil(t, pending.LastRequeuedAt)
	n, err = b.s.Redrive(ctx, ids)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is parked any more")
	n, err = b.s.Redrive(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)
	c, err = b.s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), c.Pending)
	require.Zero(t, c.Failed)
}
