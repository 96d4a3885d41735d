package mongostore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// The tests in this file run the store through the real driver against
// fakeServer: what they show is what the driver does with the server's
// answers, which lungo (no wire protocol, no error labels) cannot show.

// openFake opens the store on fs through the real connect path (the hello
// checks included).
func openFake(t testing.TB, fs *fakeServer, o Options) *Store {
	t.Helper()
	o.OpTimeout = max(o.OpTimeout, 2*time.Second)
	s, err := Open(context.Background(), fs.uri(), &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// fakeInput is one event to write.
func fakeInput(device string) []outbox.Input {
	return []outbox.Input{{SourceKey: "s", DeviceKey: device, OccurredAt: "2026-11-01T10:00:00Z", Payload: []byte(`{"t":1}`)}}
}

// fakeTx is one transaction the server saw: its commands in order.
type fakeTx struct {
	names []string
	colls []string
}

// transactions groups the commands that ran in transactions by session
// and transaction number, in the order they began.
func (fs *fakeServer) transactions() []fakeTx {
	var order []string
	txs := map[string]*fakeTx{}
	for _, c := range fs.commands() {
		n := c.lookup("txnNumber")
		if n.Type == 0 {
			continue
		}
		key := c.lookup("lsid", "id").String() + "/" + n.String()
		tx, ok := txs[key]
		if !ok {
			tx = &fakeTx{}
			txs[key] = tx
			order = append(order, key)
		}
		tx.names = append(tx.names, c.Name)
		tx.colls = append(tx.colls, c.coll())
	}
	out := make([]fakeTx, len(order))
	for i, k := range order {
		out[i] = *txs[k]
	}
	return out
}

// onColl answers the commands on coll with h, the others by default.
func (fs *fakeServer) onColl(coll string, h fakeHandler) fakeHandler {
	return func(c fakeCommand) bson.D {
		if c.coll() == coll {
			return h(c)
		}
		return fs.byDefault(c)
	}
}

// TestTransientErrorsRunTheTransactionAgain is the row "MongoDB transaction
// aborted or transient error: retried; original and outbox entry both exist
// or neither" through the driver: a TransientTransactionError (a write
// conflict, or a commit that found its transaction gone after an election)
// at each step of the writer's transaction aborts that transaction (nothing
// of it commits) and runs the whole transaction again, whose commit holds
// the original and its outbox entry. Before the store kept the driver's
// error on one chain, the label was hidden and the write failed.
func TestTransientErrorsRunTheTransactionAgain(t *testing.T) {
	t.Parallel()
	conflict := commandError(codeWriteConflict, "WriteConflict", labelTransient)
	for _, tc := range []struct {
		name  string
		setup func(fs *fakeServer)
		// first is how the failed transaction ends.
		first []string
	}{
		{"LookupKeys", func(fs *fakeServer) {
			fs.handle("find", fs.onColl(EventsCollection, failFirst(1, conflict, fs.byDefault)))
		},
			[]string{"find", "abortTransaction"}},
		{"InsertEvents", func(fs *fakeServer) {
			fs.handle("insert", fs.onColl(EventsCollection, failFirst(1, conflict, fs.byDefault)))
		}, []string{"find", "insert", "abortTransaction"}},
		{"InsertEntries", func(fs *fakeServer) {
			fs.handle("insert", fs.onColl(OutboxCollection, failFirst(1, conflict, fs.byDefault)))
		}, []string{"find", "insert", "insert", "abortTransaction"}},
		{"Commit", func(fs *fakeServer) {
			fs.handle("commitTransaction", failFirst(1, commandError(251, "NoSuchTransaction", labelTransient), fs.byDefault))
		}, []string{"find", "insert", "insert", "commitTransaction"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, false)
			s := openFake(t, fs, Options{})
			tc.setup(fs)
			res, err := outbox.NewWriter(s, nil).Write(context.Background(), fakeInput("d"))
			require.NoError(t, err)
			require.Len(t, res, 1)
			txs := fs.transactions()
			require.Len(t, txs, 2, "the failed transaction and the one run again")
			require.Equal(t, tc.first, txs[0].names, "the failed transaction is aborted, never committed with what it wrote")
			require.Equal(t, []string{"find", "insert", "insert", "commitTransaction"}, txs[1].names)
			require.Equal(t, []string{EventsCollection, EventsCollection, OutboxCollection}, txs[1].colls[:3],
				"the original and its outbox entry commit together")
		})
	}
}

// TestClaimRunsAgainOnAWriteConflict: two reconcilers claiming the same
// original in their transactions meet as a WriteConflict on the
// updateMany; the store aborts its transaction (nothing of it is claimed)
// and runs the whole claim again: a find of the candidates and the update
// in one transaction, committed.
func TestClaimRunsAgainOnAWriteConflict(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	id := primitive.NewObjectID()
	now := time.Now().UTC().Truncate(time.Millisecond)
	fs.handle("find", fs.onColl(EventsCollection, func(c fakeCommand) bson.D {
		return cursorReply("outboxd.events", "firstBatch", bson.D{{Key: "_id", Value: id}, {Key: "sourceKey", Value: "s"},
			{Key: "deviceKey", Value: "d"}, {Key: "occurredAt", Value: now}, {Key: "createdAt", Value: now}, {Key: "requeueCount", Value: int64(2)}})
	}))
	fs.handle("update", failFirst(1, commandError(codeWriteConflict, "WriteConflict", labelTransient), fs.byDefault))
	c, err := s.Claim(context.Background(), []string{id.Hex(), primitive.NewObjectID().Hex()}, now, now.Add(-time.Minute))
	require.NoError(t, err)
	require.Len(t, c.Events, 1)
	require.Equal(t, id.Hex(), c.Events[0].ID)
	require.Equal(t, int64(2), c.Events[0].RequeueCount, "the before-image")
	txs := fs.transactions()
	require.Len(t, txs, 2, "the conflicting transaction and the one run again")
	require.Equal(t, []string{"find", "update", "abortTransaction"}, txs[0].names)
	require.Equal(t, []string{"find", "update", "commitTransaction"}, txs[1].names)
}

// TestKeyRaceOnAReplicaSetIsAWriteConflict: on a replica set two
// transactions inserting the same idempotency key meet as WriteConflict
// (112, TransientTransactionError), not as a duplicate key. The loser runs
// again, finds the winner's original and answers with it (once the label
// was hidden, this ended in 503).
func TestKeyRaceOnAReplicaSetIsAWriteConflict(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	w := outbox.NewWriter(s, nil)
	b, err := w.Prepare(fakeInput("raced"))
	require.NoError(t, err)
	winner := primitive.NewObjectID()
	var mu sync.Mutex
	committedWinner := false
	fs.handle("insert", fs.onColl(EventsCollection, func(fakeCommand) bson.D {
		mu.Lock()
		defer mu.Unlock()
		committedWinner = true // the other transaction commits first
		return commandError(codeWriteConflict, "WriteConflict", labelTransient)
	}))
	fs.handle("find", fs.onColl(EventsCollection, func(c fakeCommand) bson.D {
		mu.Lock()
		defer mu.Unlock()
		if !committedWinner {
			return fs.byDefault(c)
		}
		return cursorReply("outboxd.events", "firstBatch", bson.D{{Key: "_id", Value: winner},
			{Key: "idempotencyKey", Value: b.Key(0)}, {Key: "contentHash", Value: b.ContentHash(0)}})
	}))
	res, err := w.WriteBatch(context.Background(), b)
	require.NoError(t, err)
	require.Equal(t, []outbox.Result{{ID: winner.Hex(), IdempotencyKey: b.Key(0), Duplicate: true}}, res)
	require.Len(t, fs.commands("insert"), 1, "the run again inserts nothing: the key is the winner's")
}

// TestRunTxRunsTheCallbackAgainOnATransientError: a service's own
// transaction through Store.RunTx gets the store's loop: a
// TransientTransactionError (a write conflict on the caller's own insert,
// then one on the commit) aborts the transaction and runs the callback
// again, with the driver's session context, and the caller's write and
// the event commit in the one transaction that commits.
func TestRunTxRunsTheCallbackAgainOnATransientError(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	client := fakeClient(t, fs)
	s, err := NewFromClient(context.Background(), client, "shop", nil)
	require.NoError(t, err)
	fs.handle("insert", fs.onColl("orders", failFirst(1, commandError(codeWriteConflict, "WriteConflict", labelTransient), fs.byDefault)))
	fs.handle("commitTransaction", failFirst(1, commandError(251, "NoSuchTransaction", labelTransient), fs.byDefault))
	w := outbox.NewWriter(s, nil)
	runs := 0
	err = s.RunTx(context.Background(), func(sc mongo.SessionContext, tx outbox.Tx) error {
		runs++
		if _, err := w.WriteInTx(sc, tx, fakeInput("own")); err != nil {
			return err
		}
		_, err := client.Database("shop").Collection("orders").InsertOne(sc, bson.D{{Key: "n", Value: 1}})
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 3, runs, "run again after the insert's conflict and after the commit's")
	txs := fs.transactions()
	require.Len(t, txs, 3)
	// Each run also reads the stream's number of partitions first, in the
	// caller's transaction: this server records none, and a Writer reads
	// it until one is recorded.
	require.Equal(t, []string{"find", "find", "insert", "insert", "insert", "abortTransaction"}, txs[0].names)
	require.Equal(t, []string{"find", "find", "insert", "insert", "insert", "commitTransaction"}, txs[1].names)
	require.Equal(t, []string{"find", "find", "insert", "insert", "insert", "commitTransaction"}, txs[2].names)
	require.Equal(t, []string{"events", "events", "outbox", "orders"}, txs[2].colls[1:5],
		"the caller's write and the event in the one transaction that commits")
	for _, c := range fs.commands("insert") {
		db, _ := c.lookup("$db").StringValueOK()
		require.Equal(t, "shop", db)
	}
	require.NoError(t, s.Close(context.Background()))
	require.NoError(t, client.Ping(context.Background(), nil), "Close leaves the caller's client connected")
}

// TestRunTxUnknownCommitEndsAtTheDeadline: an unknown commit result that
// repeats (the majority is lost) ends a caller's own transaction at its
// deadline with an unavailable error saying what ran, where the driver's
// WithTransaction would run on for 120 s.
func TestRunTxUnknownCommitEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s, err := NewFromClient(context.Background(), fakeClient(t, fs), "", nil)
	require.NoError(t, err)
	fs.handle("commitTransaction", func(fakeCommand) bson.D {
		fs.wait(20 * time.Millisecond)
		return writeConcernTimeout(bson.D{})
	})
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	err = writeWithin(t, 5*time.Second, func() error {
		return s.RunTx(ctx, func(sc mongo.SessionContext, tx outbox.Tx) error {
			_, err := outbox.NewWriter(s, nil).WriteInTx(sc, tx, fakeInput("d"))
			return err
		})
	})
	require.True(t, store.IsUnavailable(err), "%v", err)
	require.ErrorContains(t, err, "the caller's transaction")
	require.Less(t, time.Since(began), deadline+time.Second)
	require.Greater(t, len(fs.commands("commitTransaction")), 1, "sent again while time is left")
}

// fakeClient is a driver client of the caller's own on fs, disconnected at
// t's cleanup.
func fakeClient(t testing.TB, fs *fakeServer) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(context.Background(), options.Client().ApplyURI(fs.uri()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// TestUnknownCommitResultEndsAtTheDeadline: with the majority lost, every
// commit answers a write concern timeout (UnknownTransactionCommitResult);
// v1.17's WithTransaction sends it again for 120 s with no deadline. The
// store sends it again until the caller's deadline, then answers
// unavailable, and each commit carries the time left as maxTimeMS.
func TestUnknownCommitResultEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	fs.handle("commitTransaction", func(fakeCommand) bson.D {
		fs.wait(20 * time.Millisecond) // the server's wtimeout, shortened
		return writeConcernTimeout(bson.D{})
	})
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	err := writeWithin(t, 5*time.Second, func() error {
		_, err := outbox.NewWriter(s, nil).Write(ctx, fakeInput("d"))
		return err
	})
	took := time.Since(began)
	require.Error(t, err)
	require.True(t, store.IsUnavailable(err), "%v", err)
	require.Less(t, took, deadline+time.Second, "answered at its deadline, not after the driver's 120 s")
	commits := fs.commands("commitTransaction")
	require.Greater(t, len(commits), 1, "an unknown commit result is sent again while time is left")
	for _, c := range commits {
		ms, ok := c.lookup("maxTimeMS").AsInt64OK()
		require.True(t, ok, "every commit carries maxTimeMS: %s", c.Doc)
		require.LessOrEqual(t, ms, deadline.Milliseconds())
	}
}

// TestLostMajorityFailsAGroupWithinItsDeadline: a primary that takes
// writes but never answers a commit (its majority is gone) fails an ingest
// group within the group's deadline, and every request of the group gets
// the answer.
func TestLostMajorityFailsAGroupWithinItsDeadline(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	fs.handle("commitTransaction", func(fakeCommand) bson.D { return nil }) // never answers
	const groupTimeout = 500 * time.Millisecond
	cm, err := outbox.NewCommitter(outbox.NewWriter(s, nil), &outbox.CommitterConfig{GroupTimeout: groupTimeout, GroupWait: 5 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, cm.Start(ctx))
	defer func() { _ = cm.Stop(ctx) }()
	w := outbox.NewWriter(s, nil)
	began := time.Now()
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			b, err := w.Prepare(fakeInput(string(rune('a' + i))))
			if err == nil {
				_, err = cm.Write(ctx, b)
			}
			errs[i] = err
		})
	}
	require.NoError(t, writeWithin(t, 5*time.Second, func() error { wg.Wait(); return nil }))
	require.Less(t, time.Since(began), groupTimeout+time.Second)
	for _, err := range errs {
		require.True(t, store.IsUnavailable(err), "%v", err)
	}
}

// writeWithin runs fn and fails t when it has not returned within limit
// (the goroutine is left behind: the test has failed).
func writeWithin(t *testing.T, limit time.Duration, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("still running after %s", limit)
		return nil
	}
}

// TestEveryCommandCarriesATimeLimit: every command a store operation sends
// carries maxTimeMS, at most the operation's deadline, so the server stops
// what its caller gave up on (an abandoned UpdateMany or count); the
// client names itself with Options.AppName. The exceptions are the
// driver's: a change stream's getMore carries the await time instead, and
// abortTransaction, endSessions and killCursors take none (v1.17 offers
// none; the write concern's wtimeout bounds an abort's wait).
func TestEveryCommandCarriesATimeLimit(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	const opTimeout = 3 * time.Second
	s := openFake(t, fs, Options{OpTimeout: opTimeout, AppName: "outboxd/test"})
	hs := fs.handshakes()
	require.NotEmpty(t, hs)
	ctx := context.Background()
	id := primitive.NewObjectID().Hex()
	now := time.Now()
	lease := store.Lease{Name: "stream", Owner: "me", Term: 1}
	ops := map[string]func() error{
		"Write":      func() error { _, err := outbox.NewWriter(s, nil).Write(ctx, fakeInput("d")); return err },
		"LoadEvents": func() error { _, err := s.LoadEvents(ctx, []string{id}); return err },
		"LoadEventsAfter": func() error {
			_, err := s.LoadEvents(store.WithReadAfter(ctx, ClusterTimePosition(primitive.Timestamp{T: uint32(now.Unix())})), []string{id})
			return err
		},
		"EventByKey":     func() error { _, err := s.EventByKey(ctx, "k"); return err },
		"MarkSynced":     func() error { _, err := s.MarkSynced(ctx, []string{id}, now); return err },
		"Park":           func() error { _, err := s.Park(ctx, id, outbox.SyncFailure{Category: "poison", At: now}); return err },
		"Candidates":     func() error { _, err := s.Candidates(ctx, store.CandidateQuery{Limit: 10}); return err },
		"Claim":          func() error { _, err := s.Claim(ctx, []string{id}, now, now); return err },
		"RollbackClaims": func() error { _, err := s.RollbackClaims(ctx, now, []*outbox.Event{{ID: id}}); return err },
		"Counts":         func() error { _, err := s.Counts(ctx); return err },
		"ListEvents":     func() error { _, err := s.ListEvents(ctx, store.EventQuery{Limit: 10}); return err },
		"CountEvents":    func() error { _, err := s.CountEvents(ctx, store.EventQuery{}); return err },
		"Redrive":        func() error { _, err := s.Redrive(ctx, []string{id}); return err },
		"Undispatched":   func() error { _, err := s.Undispatched(ctx, "stream", store.Partition{}, "", 10); return err },
		"OutboxEntries":  func() error { _, err := s.OutboxEntries(ctx, id); return err },
		"MarkDispatched": func() error { return s.MarkDispatched(ctx, lease, []string{id}, now) },
		"DeleteDispatched": func() error {
			fs.handle("find", fs.findOneIn(OutboxCollection, bson.D{{Key: "_id", Value: primitive.NewObjectID()}}))
			defer fs.handle("find", fs.byDefault)
			_, err := s.DeleteDispatched(ctx, now)
			return err
		},
		"DeleteSynced": func() error {
			fs.handle("find", fs.findOneIn(EventsCollection, bson.D{{Key: "_id", Value: primitive.NewObjectID()}}))
			defer fs.handle("find", fs.byDefault)
			_, err := s.DeleteSynced(ctx, now, store.SyncedScope{Type: "t"}, 10)
			return err
		},
		"AcquireLease":   func() error { _, err := s.AcquireLease(ctx, "stream", "me", now, time.Minute); return err },
		"RenewLease":     func() error { _, err := s.RenewLease(ctx, lease, now, time.Minute); return err },
		"ReleaseLease":   func() error { _, err := s.ReleaseLease(ctx, lease); return err },
		"ReadLease":      func() error { _, err := s.ReadLease(ctx, "stream"); return err },
		"SaveCheckpoint": func() error { return s.SaveCheckpoint(ctx, lease, store.Checkpoint{At: now}) },
		"MarkRelayed":    func() error { return s.MarkRelayed(ctx, lease, []string{id}, store.Checkpoint{At: now}) },
		"Ping":           func() error { return s.Ping(ctx) },
		"CheckSchema":    func() error { return s.CheckSchema(ctx) },
		"Feed": func() error {
			f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
			if err != nil {
				return err
			}
			defer f.Close(ctx)
			_, err = f.Next(ctx, 10, 30*time.Millisecond)
			return err
		},
	}
	for name, op := range ops {
		fs.reset()
		_ = op() // the fake's empty answers make some fail (not found, fenced); the commands are what counts
		cmds := fs.commands()
		require.NotEmpty(t, cmds, name)
		if name == "DeleteDispatched" || name == "DeleteSynced" {
			require.NotEmpty(t, fs.commands("delete"), "%s: past its finds", name)
		}
		for _, c := range cmds {
			ms, ok := c.lookup("maxTimeMS").AsInt64OK()
			switch c.Name {
			case "getMore":
				require.True(t, ok, "%s: a change stream's getMore carries the await time", name)
				require.Equal(t, int64(10), ms)
			case "abortTransaction", "endSessions", "killCursors":
			default:
				require.True(t, ok, "%s: %s carries no maxTimeMS: %s", name, c.Name, c.Doc)
				require.Positive(t, ms, name)
				require.LessOrEqual(t, ms, opTimeout.Milliseconds(), "%s: %s", name, c.Name)
			}
		}
	}
	app, _ := hs[0].lookup("client", "application", "name").StringValueOK()
	require.Equal(t, "outboxd/test", app)
}

// TestFeedGetMoreHasABound: a getMore the server never answers (a hung
// primary) fails Next as unavailable after the await time and OpTimeout,
// instead of blocking the dispatcher; it reopens the feed from its
// position.
func TestFeedGetMoreHasABound(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	const opTimeout = 300 * time.Millisecond
	s := openFake(t, fs, Options{})
	s.opts.OpTimeout = opTimeout
	ctx := context.Background()
	f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(ctx)
	fs.handle("getMore", func(fakeCommand) bson.D { return nil })
	began := time.Now()
	err = writeWithin(t, 5*time.Second, func() error { _, err := f.Next(ctx, 10, 100*time.Millisecond); return err })
	require.True(t, store.IsUnavailable(err), "%v", err)
	require.Less(t, time.Since(began), 100*time.Millisecond+50*time.Millisecond+opTimeout+time.Second)
}

// TestFeedSendsTheNextGetMoreAtOnce: on a server an empty awaited getMore
// has already waited its await time (the poll interval), so the feed sends
// the next one at once, with no pause of its own after it (on lungo, whose
// TryNext returns at once, it pauses a poll interval).
func TestFeedSendsTheNextGetMoreAtOnce(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	ctx := context.Background()
	const poll = 200 * time.Millisecond
	f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: poll})
	require.NoError(t, err)
	defer f.Close(ctx)
	var mu sync.Mutex
	var answered []time.Time // when each getMore was answered
	var gaps []time.Duration // from an answer to the next getMore
	fs.handle("getMore", func(c fakeCommand) bson.D {
		mu.Lock()
		if n := len(answered); n > 0 {
			gaps = append(gaps, time.Since(answered[n-1]))
		}
		mu.Unlock()
		fs.wait(poll) // a server awaits new entries for maxAwaitTimeMS
		mu.Lock()
		answered = append(answered, time.Now())
		mu.Unlock()
		return fs.byDefault(c)
	})
	entries, err := f.Next(ctx, 10, 5*poll)
	require.NoError(t, err)
	require.Empty(t, entries)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(gaps), 3, "one awaited getMore after another for the whole wait")
	for _, g := range gaps {
		require.Less(t, g, poll/2, "no pause between awaited getMores")
	}
}

// TestServerErrorsThroughTheDriver: the codes of the classification table
// as the driver hands them over from a server's reply (a command error, a
// write concern error), to the port's classes: unavailable (503 at ingest,
// a pause elsewhere), a lost position, or a request error. An
// unclassified failure to resume a change stream is no lost position.
func TestServerErrorsThroughTheDriver(t *testing.T) {
	t.Parallel()
	token := store.Position(mustMarshal(t, bson.D{{Key: "_data", Value: "8200000001"}}))
	feedNext := func(s *Store) error {
		f, err := s.OpenFeed(context.Background(), "stream", nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			return err
		}
		defer f.Close(context.Background())
		_, err = f.Next(context.Background(), 10, 50*time.Millisecond)
		return err
	}
	resume := func(s *Store) error {
		f, err := s.OpenFeed(context.Background(), "stream", token, store.FeedOptions{})
		if err == nil {
			_ = f.Close(context.Background())
		}
		return err
	}
	loadEvents := func(s *Store) error {
		_, err := s.LoadEvents(context.Background(), []string{primitive.NewObjectID().Hex()})
		return err
	}
	markSynced := func(s *Store) error {
		_, err := s.MarkSynced(context.Background(), []string{primitive.NewObjectID().Hex()}, time.Now())
		return err
	}
	write := func(s *Store) error {
		_, err := outbox.NewWriter(s, nil).Write(context.Background(), fakeInput("d"))
		return err
	}
	const (
		unavailable = "unavailable"
		lost        = "lost"
		request     = "request"
	)
	for _, tc := range []struct {
		name, command string
		reply         bson.D
		op            func(*Store) error
		want          string
	}{
		{"ReadConcernMajorityNotAvailableYet", "find", commandError(134, "ReadConcernMajorityNotAvailableYet"), loadEvents, unavailable},
		{"FailedToSatisfyReadPreference", "find", commandError(133, "FailedToSatisfyReadPreference"), loadEvents, unavailable},
		{"MaxTimeMSExpired", "find", commandError(codeMaxTimeMSExpired, "MaxTimeMSExpired"), loadEvents, unavailable},
		{"NetworkInterfaceExceededTimeLimitFromMongos", "update", commandError(202, "NetworkInterfaceExceededTimeLimit"), markSynced, unavailable},
		{"WriteConcernTimeout", "update", writeConcernTimeout(bson.D{{Key: "n", Value: 1}, {Key: "nModified", Value: 1}}), markSynced, unavailable},
		{"TransactionTooLargeForCache", "commitTransaction", commandError(codeTransactionTooLargeForCache, "TransactionTooLargeForCache", labelTransient), write, request},
		{"CappedPositionLostOnGetMore", "getMore", commandError(136, "CappedPositionLost"), feedNext, lost},
		{"ChangeStreamHistoryLostOnResume", "aggregate", commandError(286, "ChangeStreamHistoryLost", "NonResumableChangeStreamError"), resume, lost},
		{"UnclassifiedResumeFailureIsNotLost", "aggregate", commandError(13, "Unauthorized"), resume, request},
		// A token the server refuses to parse: the same token never works
		// again, so the position is lost (not a feed that reopens forever).
		{"RefusedTokenFailedToParse", "aggregate", commandError(9, "FailedToParse"), resume, lost},
		{"RefusedToken40649", "aggregate", commandError(40649, "Location40649"), resume, lost},
		{"RefusedToken50795NewerVersion", "aggregate", commandError(50795, "Location50795"), resume, lost},
		{"RefusedToken50796", "aggregate", commandError(50796, "Location50796"), resume, lost},
		{"RefusedToken50854", "aggregate", commandError(50854, "Location50854"), resume, lost},
		{"FailedToParseElsewhereIsARequestError", "find", commandError(9, "FailedToParse"), loadEvents, request},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, false)
			s := openFake(t, fs, Options{})
			reply := tc.reply
			fs.handle(tc.command, func(fakeCommand) bson.D { return reply })
			err := tc.op(s)
			require.Error(t, err)
			got := request
			switch {
			case errors.Is(err, store.ErrPositionLost):
				got = lost
			case store.IsUnavailable(err):
				got = unavailable
			}
			require.Equal(t, tc.want, got, "%v", err)
			if tc.command == "commitTransaction" {
				require.Len(t, fs.commands("commitTransaction"), 1, "a request error is never sent again")
				require.Len(t, fs.transactions(), 1, "nor run again")
			}
		})
	}
}

func mustMarshal(t testing.TB, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestLeaseTimesComeFromTheServerClock: with the server's clock an hour
// ahead of this process's, a lease is judged and stored by the server's
// clock (the take-over condition and the expiry sent), so replicas whose
// clocks differ by more than the TTL agree on when it expires; the holder
// measures its lease on its own clock, from before its request left.
func TestLeaseTimesComeFromTheServerClock(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	const skew, ttl = time.Hour, 15 * time.Second
	fs.setSkew(skew)
	ctx := context.Background()
	fs.handle("findAndModify", fs.onColl(LeasesCollection, func(c fakeCommand) bson.D {
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: 1}}}, {Key: "value", Value: bson.D{
			{Key: "_id", Value: "s"}, {Key: "owner", Value: "me"}, {Key: "term", Value: int64(1)},
			{Key: "leaseExpiresAt", Value: c.lookup("update", "$set", "leaseExpiresAt")}}}}
	}))
	now := time.Now()
	l, err := s.AcquireLease(ctx, "s", "me", now, ttl)
	require.NoError(t, err)
	require.True(t, l.Held())
	require.Equal(t, now.UTC().Truncate(time.Millisecond).Add(ttl), l.Expires.UTC().Truncate(time.Millisecond), "the holder's own clock")
	near := func(v bson.RawValue, want time.Time) {
		t.Helper()
		got, ok := v.TimeOK()
		require.True(t, ok, "not a date: %v", v)
		require.WithinDuration(t, want, got, 2*time.Second)
	}
	acquire := fs.commands("findAndModify")
	acquire = acquire[len(acquire)-1:]
	near(acquire[0].lookup("query", "$or", "0", "leaseExpiresAt", "$lte"), now.Add(skew))
	near(acquire[0].lookup("update", "$set", "leaseExpiresAt"), now.Add(skew+ttl))

	fs.reset()
	_, err = s.RenewLease(ctx, l, time.Now(), ttl)
	require.NoError(t, err)
	renew := fs.commands("update")
	require.Len(t, renew, 1)
	near(renew[0].lookup("updates", "0", "u", "$set", "leaseExpiresAt"), time.Now().Add(skew+ttl))
}

// TestFailedCountsAreKeptBriefly: during an outage, scrapes within
// CountsTTL get the last failure without running the counts again; after
// it, Counts reads again.
func TestFailedCountsAreKeptBriefly(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{CountsTTL: time.Hour})
	fs.handle("aggregate", func(fakeCommand) bson.D { return commandError(134, "ReadConcernMajorityNotAvailableYet") })
	ctx := context.Background()
	_, err := s.Counts(ctx)
	require.True(t, store.IsUnavailable(err), "%v", err)
	sent := len(fs.commands())
	_, again := s.Counts(ctx)
	require.Equal(t, err, again, "the failure is served from the cache")
	require.Len(t, fs.commands(), sent, "no command sent within CountsTTL")

	s.opts.CountsTTL = time.Nanosecond
	fs.handle("aggregate", nil)
	_, err = s.Counts(ctx)
	require.NoError(t, err, "read again after CountsTTL")
	require.Greater(t, len(fs.commands()), sent)
}

// TestMigrateOnAShardedCluster: through a mongos, migrate reads how the
// events collection is sharded and refuses a shard key that cannot hold
// the unique idempotencyKey index (two writers of one key on two shards
// would both insert); unsharded, or sharded on {idempotencyKey: 1}, it
// creates the indexes. The leases, clock and settings collections, whose
// documents are upserted by _id alone (before 7.1 an upsert needs the
// whole shard key), may be unsharded or sharded on _id only. On a replica
// set it reads no shard key.
func TestMigrateOnAShardedCluster(t *testing.T) {
	t.Parallel()
	events, leases := "outboxd."+EventsCollection, "outboxd."+LeasesCollection
	for _, tc := range []struct {
		name string
		keys map[string]bson.D // by namespace; absent: not sharded
		err  error             // nil: migrate creates the indexes
	}{
		{"Unsharded", nil, nil},
		{"ShardedOnTheKey", map[string]bson.D{events: {{Key: "idempotencyKey", Value: 1}}}, nil},
		{"ShardedOnTheDevice", map[string]bson.D{events: {{Key: "sourceKey", Value: 1}, {Key: "deviceKey", Value: 1}}}, ErrShardKey},
		{"HashedOnTheKey", map[string]bson.D{events: {{Key: "idempotencyKey", Value: "hashed"}}}, ErrShardKey},
		{"ShardedOnID", map[string]bson.D{events: {{Key: "_id", Value: 1}}}, ErrShardKey},
		{"LeasesHashedOnID", map[string]bson.D{leases: {{Key: "_id", Value: "hashed"}}}, nil},
		{"LeasesOnTheOwner", map[string]bson.D{leases: {{Key: "owner", Value: 1}}}, ErrUpsertShardKey},
		{"ClockOnAnotherKey", map[string]bson.D{"outboxd." + ClockCollection: {{Key: "at", Value: 1}}}, ErrUpsertShardKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, true)
			s := openFake(t, fs, Options{})
			require.True(t, s.mongos)
			fs.handle("find", func(c fakeCommand) bson.D {
				if db, _ := c.lookup("$db").StringValueOK(); db != "config" || c.coll() != "collections" {
					return fs.byDefault(c)
				}
				ns, _ := c.lookup("filter", "_id").StringValueOK()
				key, ok := tc.keys[ns]
				if !ok {
					return fs.byDefault(c)
				}
				return cursorReply("config.collections", "firstBatch", bson.D{{Key: "_id", Value: ns}, {Key: "key", Value: key}, {Key: "unique", Value: false}})
			})
			err := s.Migrate(context.Background(), nil)
			if tc.err == nil {
				require.NoError(t, err)
				require.NotEmpty(t, fs.commands("createIndexes"))
				return
			}
			require.ErrorIs(t, err, tc.err)
			for ns := range tc.keys {
				require.ErrorContains(t, err, ns+" is sharded on")
			}
			require.Empty(t, fs.commands("createIndexes"), "nothing created on a layout that cannot hold it")
		})
	}
	t.Run("ReplicaSetReadsNoShardKey", func(t *testing.T) {
		t.Parallel()
		fs := newFakeServer(t, false)
		s := openFake(t, fs, Options{})
		require.NoError(t, s.Migrate(context.Background(), nil))
		for _, c := range fs.commands("find") {
			db, _ := c.lookup("$db").StringValueOK()
			require.NotEqual(t, "config", db)
		}
	})
}

// TestMigrateOnAPopulatedCollection: an index build on a populated
// collection (here: createIndexes answered after longer than ten
// OpTimeouts, the old fixed deadline) is not bounded by OpTimeout: each
// createIndexes carries Migrate's own long deadline as maxTimeMS, so the
// server does not abort the build, and Migrate waits for it.
func TestMigrateOnAPopulatedCollection(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	s.opts.OpTimeout = 30 * time.Millisecond
	fs.handle("createIndexes", func(c fakeCommand) bson.D {
		if name, _ := c.lookup("indexes", "0", "name").StringValueOK(); name == IndexReconciler {
			fs.wait(400 * time.Millisecond) // > 10 × OpTimeout
		}
		return bson.D{}
	})
	require.NoError(t, s.Migrate(context.Background(), nil))
	builds := fs.commands("createIndexes")
	require.NotEmpty(t, builds)
	for _, c := range builds {
		ms, ok := c.lookup("maxTimeMS").AsInt64OK()
		require.True(t, ok, "%s", c.Doc)
		require.Greater(t, ms, (MigrateTimeoutDefault - time.Minute).Milliseconds(), "the build's deadline is Options.MigrateTimeout, not OpTimeout")
	}
}

// TestMigrateRebuildsBeforeDropping: an outboxd index whose keys changed
// is built anew under its other name before the old one is dropped, so the
// queries it serves always have one; a build already running on the server
// (currentOp) is joined, and one still running at Migrate's deadline is
// reported as such (ErrIndexBuildRunning), never dropped or started again.
func TestMigrateRebuildsBeforeDropping(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	fs.handle("listIndexes", fs.onColl(EventsCollection, func(c fakeCommand) bson.D {
		return cursorReply("outboxd.events", "firstBatch", bson.D{{Key: "v", Value: 2}, {Key: "name", Value: IndexReconciler},
			{Key: "key", Value: bson.D{{Key: "syncedAt", Value: 1}, {Key: "createdAt", Value: 1}}}})
	}))
	require.NoError(t, s.Migrate(context.Background(), nil))
	var order []string
	for _, c := range fs.commands("createIndexes", "dropIndexes") {
		name, _ := c.lookup("indexes", "0", "name").StringValueOK()
		if c.Name == "dropIndexes" {
			name, _ = c.lookup("index").StringValueOK()
		}
		if strings.HasPrefix(name, IndexReconciler) {
			order = append(order, c.Name+" "+name)
		}
	}
	require.Equal(t, []string{"createIndexes " + IndexReconciler + rebuiltSuffix, "dropIndexes " + IndexReconciler}, order)

	t.Run("RunningBuildIsJoinedAndReported", func(t *testing.T) {
		fs.reset()
		fs.handle("currentOp", func(fakeCommand) bson.D {
			return bson.D{{Key: "inprog", Value: bson.A{bson.D{{Key: "opid", Value: int32(7)}, {Key: "secs_running", Value: int64(3600)},
				{Key: "msg", Value: "Index Build: scanning collection"}}}}}
		})
		fs.handle("createIndexes", func(fakeCommand) bson.D { return commandError(codeMaxTimeMSExpired, "MaxTimeMSExpired") })
		err := s.Migrate(context.Background(), nil)
		require.ErrorIs(t, err, ErrIndexBuildRunning)
		require.ErrorContains(t, err, "operation 7")
		require.ErrorContains(t, err, "run Store.Migrate again")
		require.Len(t, fs.commands("createIndexes"), 1, "one build joined, no other started")
		require.Empty(t, fs.commands("dropIndexes"), "the old index stays while the new one is built")
	})
}

// TestLeaseExpiryWithASlowMajority: the server reads its clock for the
// lease when the clock write applies, then waits for the majority (here
// 400 ms). The expiry the store writes is never before the holder's own
// (now + ttl), so a standby, judged by the server's clock, cannot take
// over while the holder still believes it leads (within the 2 ms of BSON
// dates, which hold milliseconds); with the round trip's
// midpoint taken as the reading, it was half the wait early.
func TestLeaseExpiryWithASlowMajority(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	const majorityWait, ttl = 400 * time.Millisecond, 15 * time.Second
	fs.handle("findAndModify", func(c fakeCommand) bson.D {
		if c.coll() == ClockCollection {
			read := fs.now() // $currentDate, before the majority wait
			fs.wait(majorityWait)
			return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: 1}}},
				{Key: "value", Value: bson.D{{Key: "_id", Value: clockID}, {Key: clockField, Value: read}}}}
		}
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: 1}}}, {Key: "value", Value: bson.D{
			{Key: "_id", Value: "s"}, {Key: "owner", Value: "me"}, {Key: "term", Value: int64(1)},
			{Key: "leaseExpiresAt", Value: c.lookup("update", "$set", "leaseExpiresAt")}}}}
	})
	l, err := s.AcquireLease(context.Background(), "s", "me", time.Now(), ttl)
	require.NoError(t, err)
	cmds := fs.commands("findAndModify")
	written, ok := cmds[len(cmds)-1].lookup("update", "$set", "leaseExpiresAt").TimeOK()
	require.True(t, ok)
	require.False(t, written.Before(l.Expires.Add(-2*time.Millisecond)),
		"the server's expiry %s is before the holder's %s", written.UTC(), l.Expires.UTC())

	fs.reset()
	now := time.Now()
	l, err = s.RenewLease(context.Background(), l, now, ttl)
	require.NoError(t, err)
	renew := fs.commands("update")
	require.Len(t, renew, 1)
	written, ok = renew[0].lookup("updates", "0", "u", "$set", "leaseExpiresAt").TimeOK()
	require.True(t, ok)
	require.False(t, written.Before(l.Expires.Add(-2*time.Millisecond)), "renewal: %s before %s", written.UTC(), l.Expires.UTC())
}

// TestArbiterIsWarnedAtStart: a replica set whose hello lists an arbiter
// opens (it works while every member is up) with a warning that names the
// arbiter and says what to run instead; a set without one, and a mongos,
// open without warnings.
func TestArbiterIsWarnedAtStart(t *testing.T) {
	t.Parallel()
	t.Run("Arbiter", func(t *testing.T) {
		t.Parallel()
		fs := newFakeServer(t, false)
		fs.arbiters = []string{"127.0.0.1:1"} // refuses connections: the driver's monitor marks it unknown
		s := openFake(t, fs, Options{})
		w := s.Warnings()
		require.Len(t, w, 1)
		require.Contains(t, w[0], "arbiter (127.0.0.1:1)")
		require.Contains(t, w[0], "use three data-bearing members")
	})
	t.Run("NoArbiter", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, openFake(t, newFakeServer(t, false), Options{}).Warnings())
	})
	t.Run("Mongos", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, openFake(t, newFakeServer(t, true), Options{}).Warnings())
	})
}

// TestLoadEventsTargetsTheShards: through a mongos, the worker's read of
// originals names their idempotency keys beside their ids when the context
// carries them (store.WithEventKeys), so mongos targets the shards holding
// those keys (events is sharded on {idempotencyKey: 1}); what it does not
// find that way is read again by _id alone. On a replica set, or without
// the keys, it reads by _id alone.
func TestLoadEventsTargetsTheShards(t *testing.T) {
	t.Parallel()
	ids := []string{primitive.NewObjectID().Hex(), primitive.NewObjectID().Hex()}
	keyed := store.WithEventKeys(context.Background(), map[string]string{ids[0]: "k0", ids[1]: "k1"})
	finds := func(t *testing.T, mongos bool, ctx context.Context) []fakeCommand {
		cmds, got := loadEventsFinds(ctx, t, mongos, ids)
		require.Empty(t, got, "the fake holds no originals")
		return cmds
	}
	keysOf := func(c fakeCommand) []string {
		arr, ok := c.lookup("filter", "idempotencyKey", "$in").ArrayOK()
		if !ok {
			return nil
		}
		vals, _ := arr.Values()
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = v.StringValue()
		}
		return out
	}
	t.Run("MongosWithKeys", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, true, keyed)
		require.Len(t, cmds, 2)
		require.Equal(t, []string{"k0", "k1"}, keysOf(cmds[0]), "targeted by the keys: %s", cmds[0].Doc)
		require.Nil(t, keysOf(cmds[1]), "the missing ones again by _id alone: %s", cmds[1].Doc)
		missing, _ := cmds[1].lookup("filter", "_id", "$in").ArrayOK()
		vals, _ := missing.Values()
		require.Len(t, vals, 2)
	})
	t.Run("MongosWithoutKeys", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, true, context.Background())
		require.Len(t, cmds, 1)
		require.Nil(t, keysOf(cmds[0]))
	})
	t.Run("ReplicaSet", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, false, keyed)
		require.Len(t, cmds, 1)
		require.Nil(t, keysOf(cmds[0]), "the _id index serves it on a replica set")
	})
}
