package mongostore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

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
		{"LookupKeys", func(fs *fakeServer) { fs.handle("find", failFirst(1, conflict, fs.byDefault)) },
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

// TestOwnTransactionSeesTheLabels: a caller running its own transaction
// with the driver's WithTransaction and the store's Tx (README "Using the
// writer from Go") gets the driver's retry on a transient error, because
// the store's errors keep the driver's error on one chain.
func TestOwnTransactionSeesTheLabels(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	fs.handle("find", failFirst(1, commandError(codeWriteConflict, "WriteConflict", labelTransient), fs.byDefault))
	w := outbox.NewWriter(s, nil)
	ctx := context.Background()
	sess, err := s.Database().Client().StartSession()
	require.NoError(t, err)
	defer sess.EndSession(ctx)
	_, err = sess.WithTransaction(ctx, func(sc lungo.ISessionContext) (any, error) {
		return w.WriteInTx(sc, s.Tx(sc), fakeInput("own"))
	})
	require.NoError(t, err)
	require.Len(t, fs.transactions(), 2)
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
