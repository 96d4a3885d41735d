package mongostore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
)

// skipUnlessOptedIn skips t unless OUTBOXD_TEST_MONGO_URI names a replica
// set and env is set: a test the mongo workflow runs on its own, because it
// does what the others must not meet (why).
func skipUnlessOptedIn(t *testing.T, env, why string) {
	t.Helper()
	testkit.SkipUnlessRealMongo(t)
	if os.Getenv(env) == "" {
		t.Skipf("skipped: %s; set %s=1 (the mongo workflow does)", why, env)
	}
}

// failPoint arms the server's failCommand fail point (mongod started with
// enableTestCommands) for the commands of the client named app, once, and
// disarms it at cleanup.
func failPoint(t *testing.T, s *mongostore.Store, app string, data bson.D) {
	t.Helper()
	ctx := context.Background()
	admin := mongoseam.Database(s).Client().Database("admin")
	data = append(data, bson.E{Key: "appName", Value: app})
	require.NoError(t, admin.RunCommand(ctx, bson.D{{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}}, {Key: "data", Value: data}}).Err())
	t.Cleanup(func() {
		_ = admin.RunCommand(ctx, bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}).Err()
	})
}

// TestFailCommandOnARealServer runs cases of the scripted server
// (driver_internal_test.go) against a real replica set through its
// failCommand fail point: the same answers, from the server itself, for
// each MongoDB release of the mongo workflow. It needs
// OUTBOXD_TEST_MONGO_FAILCOMMAND=1 and a mongod started with
// --setParameter enableTestCommands=1.
func TestFailCommandOnARealServer(t *testing.T) {
	skipUnlessOptedIn(t, "OUTBOXD_TEST_MONGO_FAILCOMMAND", "needs mongod with enableTestCommands")
	ctx := context.Background()
	open := func(t *testing.T) (*mongostore.Store, string) {
		app := testkit.Name("outboxd-fail")
		return testkit.NewMongo(t, &mongostore.Options{AppName: app}), app
	}
	t.Run("WriteConflictOnTheEntriesRunsTheTransactionAgain", func(t *testing.T) {
		s, app := open(t)
		failPoint(t, s, app, bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 112},
			{Key: "errorLabels", Value: bson.A{"TransientTransactionError"}}})
		res, err := outbox.NewWriter(s, nil).Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		require.Len(t, res, 1)
		entries, err := s.OutboxEntries(ctx, res[0].ID)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the original and its entry, once")
	})
	t.Run("WriteConcernTimeoutOnTheCommitIsSentAgain", func(t *testing.T) {
		s, app := open(t)
		failPoint(t, s, app, bson.D{{Key: "failCommands", Value: bson.A{"commitTransaction"}},
			{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: 64}, {Key: "errmsg", Value: "waiting for replication timed out"}}}})
		res, err := outbox.NewWriter(s, nil).Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		require.Len(t, res, 1)
	})
	t.Run("HistoryLostOnAGetMoreLosesThePosition", func(t *testing.T) {
		s, app := open(t)
		f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		defer f.Close(ctx)
		failPoint(t, s, app, bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 286}})
		_, err = f.Next(ctx, 10, time.Second)
		require.ErrorIs(t, err, store.ErrPositionLost)
	})
	t.Run("ElectionOnAGetMoreIsUnavailable", func(t *testing.T) {
		s, app := open(t)
		f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		defer f.Close(ctx)
		// The driver resumes a change stream once after a resumable error
		// itself; the fail point fires once, so Next goes on.
		failPoint(t, s, app, bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 189},
			{Key: "errorLabels", Value: bson.A{"ResumableChangeStreamError"}}})
		_, err = f.Next(ctx, 10, 300*time.Millisecond)
		require.True(t, err == nil || store.IsUnavailable(err), "%v", err)
	})
}

// TestHistoryLostOnARealOplog rolls a real oplog over (the mongo
// workflow's single-node set with the smallest oplog, 990 MB) while a
// feed's saved position waits: reopening from it is a lost position
// (ChangeStreamHistoryLost, 286), as the dispatcher's tests show on lungo.
// It needs OUTBOXD_TEST_MONGO_ROLLOVER=1; it writes a little more than the
// oplog holds.
func TestHistoryLostOnARealOplog(t *testing.T) {
	skipUnlessOptedIn(t, "OUTBOXD_TEST_MONGO_ROLLOVER", "writes past a 990 MB oplog, on a set of its own")
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	f, err := s.OpenFeed(ctx, "stream", nil, store.FeedOptions{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = outbox.NewWriter(s, &outbox.WriterConfig{Stream: "stream"}).Write(ctx,
		[]outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := f.Next(ctx, 1, 100*time.Millisecond)
		require.NoError(t, err)
		return len(got) == 1
	}, 30*time.Second, time.Millisecond)
	token := f.Position()
	require.NoError(t, f.Close(ctx))

	scratch := mongoseam.Database(s).Collection("scratch")
	pad := strings.Repeat("x", 1<<20) // 1 MiB a document
	for i := range 1200 {
		_, err := scratch.InsertOne(ctx, bson.D{{Key: "i", Value: i}, {Key: "pad", Value: pad}})
		require.NoError(t, err)
	}
	// The open, or its first getMore, says the token is gone.
	again, err := s.OpenFeed(ctx, "stream", token, store.FeedOptions{})
	if err == nil {
		_, err = again.Next(ctx, 1, time.Second)
		_ = again.Close(ctx)
	}
	require.ErrorIs(t, err, store.ErrPositionLost)
}
