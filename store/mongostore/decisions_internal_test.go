package mongostore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/readpref"

	"github.com/outboxd/outboxd/store"
)

// TestCheckHello is the decision behind the start-up refusal of a
// standalone server and of a server older than 4.4 (lungo cannot show a
// real hello reply).
func TestCheckHello(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkHello(bson.M{"setName": "rs0", "isWritablePrimary": true, "maxWireVersion": int32(21)}))
	require.NoError(t, checkHello(bson.M{"msg": "isdbgrid", "maxWireVersion": int32(17)}))
	err := checkHello(bson.M{"isWritablePrimary": true, "maxWireVersion": int32(21)})
	require.ErrorIs(t, err, ErrStandalone)
	require.Contains(t, err.Error(), "--replSet")
	err = checkHello(bson.M{"setName": "rs0", "maxWireVersion": int32(8)}) // 4.2
	require.ErrorIs(t, err, ErrTooOld)
	require.Contains(t, err.Error(), "4.4")
}

// TestClientOptions shows the options built for a URI that asks for a
// secondary: every read and transaction still goes to the primary, writes
// are majority with a wtimeout, reads majority. (On a server, a
// transaction with readPreference secondary fails with "read preference in
// a transaction must be primary", and a worker reading originals from a
// lagging secondary would take a new original for a missing one.)
func TestClientOptions(t *testing.T) {
	t.Parallel()
	o := ClientOptions("mongodb://h1,h2/?replicaSet=rs0&readPreference=secondaryPreferred&w=1&maxPoolSize=5", Options{OpTimeout: 7 * time.Second, MaxPoolSize: 20})
	require.Equal(t, readpref.PrimaryMode, o.ReadPreference.Mode())
	require.Equal(t, "majority", o.WriteConcern.W)
	require.Equal(t, 7*time.Second, o.WriteConcern.WTimeout) //nolint:staticcheck // the option under test
	require.Equal(t, "majority", o.ReadConcern.Level)
	require.Equal(t, 7*time.Second, *o.ServerSelectionTimeout)
	require.Equal(t, 7*time.Second, *o.Timeout, "timeoutMS: every command carries its time left as maxTimeMS")
	require.Equal(t, uint64(20), *o.MaxPoolSize, "the setting replaces the URI's maxPoolSize")
	require.Equal(t, AppNameDefault, *o.AppName)
	require.Equal(t, "mine", *ClientOptions("mongodb://h1/?replicaSet=rs0&appName=mine", Options{AppName: "outboxd/ingest"}).AppName,
		"an appName in the URI wins")
}

// TestClassify is the one classification table of MongoDB errors, by the
// server's error categories: network, not-primary, shutdown, time-limit,
// retriable and overload codes, a write concern timeout and the retryable
// labels are "unavailable" (503 at ingest, a pause for the other
// components), never a lost position; only the non-resumable change-stream
// codes (286, 280), 260, 136 and 40585 lose a position; a transaction too
// large for the cache is a request error even when labelled transient
// (running it again cannot make it smaller). The same codes through the
// driver: TestServerErrorsThroughTheDriver.
func TestClassify(t *testing.T) {
	t.Parallel()
	cmd := func(code int32, labels ...string) error {
		return mongo.CommandError{Code: code, Name: fmt.Sprint(code), Labels: labels}
	}
	for _, tc := range []struct {
		name string
		err  error
		want errClass
	}{
		{"NotWritablePrimary", cmd(10107), classUnavailable},
		{"NotPrimaryNoSecondaryOk", cmd(13435), classUnavailable},
		{"InterruptedDueToReplStateChange", cmd(11602), classUnavailable},
		{"PrimarySteppedDown", cmd(189), classUnavailable},
		{"ShutdownInProgress", cmd(91), classUnavailable},
		{"InterruptedAtShutdown", cmd(11600), classUnavailable},
		{"WriteConcernFailedWTimeout", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Name: "WriteConcernFailed"}}, classUnavailable},
		{"RetryableWriteErrorLabel", cmd(1234, "RetryableWriteError"), classUnavailable},
		{"ResumableChangeStreamErrorLabel", cmd(1234, "ResumableChangeStreamError"), classUnavailable},
		{"NonResumableLabelAloneIsNotLost", cmd(1234, "NonResumableChangeStreamError"), classOther},
		{"ChangeStreamHistoryLost", cmd(286, "NonResumableChangeStreamError"), classPositionLost},
		{"ChangeStreamFatalError", cmd(280), classPositionLost},
		{"InvalidResumeToken", cmd(260), classPositionLost},
		{"ResumeTokenNotFound", cmd(40585), classPositionLost},
		{"LungoLostOplogPosition", fmt.Errorf("wrapped: %w", lungo.ErrLostOplogPosition), classPositionLost},
		{"LungoUnableToResume", errors.New("unable to resume change stream"), classPositionLost},
		{"LungoEngineClosed", lungo.ErrEngineClosed, classUnavailable},
		{"ClientDisconnected", mongo.ErrClientDisconnected, classUnavailable},
		{"DeadlineExceeded", fmt.Errorf("op: %w", context.DeadlineExceeded), classUnavailable},
		{"DuplicateKey", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000}}}, classDuplicateKey},
		{"Other", errors.New("boom"), classOther},
		{"BadValue", cmd(2), classOther},
		{"CappedPositionLost", cmd(136), classPositionLost},
		{"ReadConcernMajorityNotAvailableYet", cmd(134), classUnavailable},
		{"FailedToSatisfyReadPreference", cmd(133), classUnavailable},
		{"NetworkInterfaceExceededTimeLimitFromMongos", cmd(202), classUnavailable},
		{"MaxTimeMSExpired", cmd(50), classUnavailable},
		{"WriteConcernTimeoutOnACommit", cmd(64, "UnknownTransactionCommitResult"), classUnavailable},
		{"TransactionTooLargeForCache", cmd(388), classOther},
		{"TransactionTooLargeForCacheLabelledTransient", cmd(388, "TransientTransactionError"), classOther},
		{"WriteConflictInATransaction", cmd(112, "TransientTransactionError"), classUnavailable},
		{"UnsatisfiableWriteConcern", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 100}}, classOther},
		{"AdmissionQueueOverflow", cmd(433), classUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, classify(tc.err))
		})
	}
	require.True(t, store.IsUnavailable(wrap(cmd(189), "writing")))
	// The store's errors keep the driver's error on one Unwrap() error
	// chain, where WithTransaction looks for its labels.
	wrapped := fmt.Errorf("error looking up idempotency keys: %w", wrap(cmd(112, "TransientTransactionError"), "looking up"))
	found := false
	for e := wrapped; e != nil; e = errors.Unwrap(e) {
		if ce, ok := e.(mongo.CommandError); ok { //nolint:errorlint // the single chain itself is under test
			found = ce.HasErrorLabel("TransientTransactionError")
		}
	}
	require.True(t, found, "the command error and its label are on the single chain")
	require.True(t, retryable(wrapped))
	require.False(t, retryable(cmd(388, "TransientTransactionError")), "a request error never runs again")
	require.ErrorIs(t, wrap(cmd(286), "reading"), store.ErrPositionLost)
	require.NoError(t, wrap(nil, "nothing"))
}

// TestFeedPipeline is the change stream's filter on a server: inserts into
// the stream and the end-of-feed events, so the dispatcher's own
// dispatchedAt updates and the TTL deletes do not travel back (lungo gets
// no pipeline: it panics on one, and the feed filters in Go there).
func TestFeedPipeline(t *testing.T) {
	t.Parallel()
	p := feedPipeline("s1", store.Partition{})
	require.Len(t, p, 1)
	match, err := bson.MarshalExtJSON(p[0], false, false)
	require.NoError(t, err)
	require.JSONEq(t, `{"$match":{"$or":[
		{"operationType":"insert","fullDocument.stream":"s1"},
		{"operationType":{"$in":["invalidate","drop","rename","dropDatabase"]}}]}}`, string(match))
}

// TestCollModTTL is the command a changed --outbox-retention runs on a
// server: collMod changes expireAfterSeconds in place (no index rebuild
// waiting for every voting member).
func TestCollModTTL(t *testing.T) {
	t.Parallel()
	cmd, err := bson.MarshalExtJSON(collModTTL(OutboxCollection, IndexOutboxTTL, 3600), false, false)
	require.NoError(t, err)
	require.JSONEq(t, `{"collMod":"outbox","index":{"name":"dispatched_ttl","expireAfterSeconds":3600}}`, string(cmd))
}
